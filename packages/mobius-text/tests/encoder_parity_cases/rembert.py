"""RemBERT: narrow input embeddings mapped up, a masked-LM head through its own output width."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "rembert": (
        "rembert",
        dict(
            input_embedding_size=16,
            output_embedding_size=24,
            type_vocab_size=2,
            bos_token_id=2,
            eos_token_id=3,
        ),
    ),
    "rembert-wide-inputs-relu": (
        "rembert",
        dict(
            input_embedding_size=32,
            output_embedding_size=48,
            hidden_act="relu",
            bos_token_id=2,
            eos_token_id=3,
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "rembert-answers-choices": (
        "rembert",
        dict(
            input_embedding_size=16,
            output_embedding_size=24,
            type_vocab_size=2,
            bos_token_id=2,
            eos_token_id=3,
        ),
        SPAN_AND_CHOICE,
    ),
}
