"""The embedded world's tokenizer: byte-level BPE trained locally, with a ChatML chat template.

Why these choices:
- byte-level BPE never meets an unknown character, so any model output (SQL, JSON, numbers)
  round-trips exactly;
- every digit is its own token (as in Qwen's and LLaMA's tokenizers): with whole numbers as
  merged tokens, "67 + 7 = 74" is a lookup over arbitrary ids that a few-million-parameter
  model never learned (it scored 0 on every arithmetic suite); per-digit tokens make the
  carry a pattern it can pick up;
- `<|im_end|>` ends an assistant turn and is the eos token generation stops at, while
  `<|endoftext|>` is a distinct pad token: TRL masks padding out of the loss, so padding with
  eos would also mask the eos the model must learn to emit;
- the template marks the assistant turn with `{% generation %}` so TRL's
  `assistant_only_loss` works too (prompt/completion data gives completion-only loss anyway).
"""

from __future__ import annotations

from collections.abc import Iterable
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, EOS, BOS_TURN = "<|endoftext|>", "<|im_end|>", "<|im_start|>"
SPECIAL_TOKENS = (PAD, BOS_TURN, EOS)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, model_max_length: int):
    """Train a byte-level BPE on `texts` and wrap it as a PreTrainedTokenizerFast.

    Deterministic for the same texts in the same order (the `tokenizers` BPE trainer breaks
    ties by byte order)."""
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 (transformers)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=model_max_length,
        padding_side="left",  # batched generation needs left padding; TRL sets its own for training
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def world_texts(sft_rows: Iterable[dict]) -> Iterable[str]:
    """The text a tokenizer is trained on: every message of the given SFT rows, rendered as
    ChatML so that the template's markers are tokenized as they will appear."""
    for row in sft_rows:
        for msg in list(row["prompt"]) + list(row["completion"]):
            yield f"{BOS_TURN}{msg['role']}\n{msg['content']}{EOS}\n"
