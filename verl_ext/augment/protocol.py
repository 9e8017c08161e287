"""The augmentation protocol: the request the policy sees and the tagged answer it must write.

HeaPA asks the current policy to write a new problem close to a parent (spec §5). The answer format is
``<NEW> problem <DIFFICULTY> factor <END>``; the difficulty factor is the child's difficulty relative to the
parent, clamped to [0.75, 1.33]. The tiny CPU model is warm-started on exactly these messages, so the
rendering here is the single source of truth for both the assets and the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TAG_ORIGINAL = "<ORIGINAL>"
TAG_ORIGINAL_END = "</ORIGINAL>"
TAG_NEW = "<NEW>"
TAG_DIFFICULTY = "<DIFFICULTY>"
TAG_END = "<END>"
ALL_TAGS = (TAG_ORIGINAL, TAG_ORIGINAL_END, TAG_NEW, TAG_DIFFICULTY, TAG_END)
DIFFICULTY_MIN = 0.75
DIFFICULTY_MAX = 1.33

DEFAULT_INSTRUCTION = (
    "Write one new problem similar to the original: same topic, structure and kind of answer, "
    "with slightly changed numbers. Then rate its difficulty relative to the original "
    f"(a factor between {DIFFICULTY_MIN} and {DIFFICULTY_MAX}; above 1 means harder)."
)
DEFAULT_FORMAT = f"Reply exactly as: {TAG_NEW} new problem {TAG_DIFFICULTY} factor {TAG_END}"


@dataclass(frozen=True)
class Shot:
    """A worked example shown before the real request (few-shot)."""

    original: str
    new: str
    difficulty: float


DEFAULT_SHOTS: tuple[Shot, ...] = (
    Shot(
        original="A rectangle has length 8 and width 5. What is its area?",
        new="A rectangle has length 9 and width 6. What is its area?",
        difficulty=1.05,
    ),
)


@dataclass(frozen=True)
class AugmentPrompt:
    """The text of the augmentation request; every field is a config knob."""

    instruction: str = DEFAULT_INSTRUCTION
    answer_format: str = DEFAULT_FORMAT
    shots: tuple[Shot, ...] = field(default=DEFAULT_SHOTS)


def format_answer(new_problem: str, difficulty: float) -> str:
    """The tagged answer the policy is expected to write."""
    return f"{TAG_NEW} {new_problem.strip()} {TAG_DIFFICULTY} {difficulty:.2f} {TAG_END}"


def _request(original: str, spec: AugmentPrompt) -> str:
    # Plain concatenation, never str.format on problem text: a '$' or '{' in a problem must pass unchanged.
    return (
        spec.instruction + "\n" + TAG_ORIGINAL + "\n" + original.strip() + "\n" + TAG_ORIGINAL_END + "\n"
        + spec.answer_format
    )


def build_messages(original: str, spec: AugmentPrompt | None = None) -> list[dict[str, str]]:
    """Chat messages asking for a variant of ``original``; shots become earlier user/assistant turns.

    The caller renders them with the tokenizer's own chat template (never a hard-coded one).
    """
    spec = spec or AugmentPrompt()
    messages: list[dict[str, str]] = []
    for shot in spec.shots:
        messages.append({"role": "user", "content": _request(shot.original, spec)})
        messages.append({"role": "assistant", "content": format_answer(shot.new, shot.difficulty)})
    messages.append({"role": "user", "content": _request(original, spec)})
    return messages
