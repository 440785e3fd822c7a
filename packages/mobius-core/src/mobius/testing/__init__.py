"""The synthetic-parity kit every domain package reuses (needs torch and transformers: test-only).

A tiny HF model is made from a config, every parameter perturbed with seeded
noise, saved with ``save_pretrained``, built through the same path as
``mobius build``, and compared in ONNX Runtime against PyTorch at fp32.
"""

from mobius.testing._audio_parity import (
    AudioParity,
    check_audio_parity,
    make_random_audio_model,
    random_audio_batch,
)
from mobius.testing._checkpoints import (
    TINY_LLAMA_CONFIG,
    tiny_llama_shapes,
    tiny_llama_tensors,
    write_tiny_llama,
)
from mobius.testing._cross_vl_parity import (
    OnnxCrossAttentionVL,
    check_cross_attention_vl_parity,
)
from mobius.testing._diffusion_parity import (
    DiffusionParity,
    check_diffusion_parity,
    make_random_diffusers_model,
)
from mobius.testing._encoder_parity import (
    EncoderParity,
    check_encoder_parity,
    make_random_encoder,
    right_padded_batch,
)
from mobius.testing._generation import genai_greedy, torch_greedy
from mobius.testing._gguf import write_gguf
from mobius.testing._graph import module_graph, run_module
from mobius.testing._parity import (
    CausalLMParity,
    OnnxCausalLM,
    build_with_cli,
    check_causal_lm_parity,
    left_padded_batch,
    make_random_model,
    perturb_parameters,
)
from mobius.testing._seq2seq_parity import (
    OnnxSeq2Seq,
    Seq2SeqParity,
    check_seq2seq_parity,
    make_random_seq2seq,
)
from mobius.testing._smollm2 import SMOLLM2_GGUF, smollm2_gguf, write_smollm2_checkpoint
from mobius.testing._speech_parity import OnnxSpeechToText, check_speech_to_text_parity
from mobius.testing._vision_parity import (
    VisionParity,
    check_vision_parity,
    make_random_vision_model,
    random_pixels,
)
from mobius.testing._vl_parity import (
    OnnxVisionLanguage,
    check_vision_language_parity,
    tiny_tokenizer,
)
from mobius.testing._zero_shot_parity import (
    ZeroShotParity,
    check_zero_shot_parity,
    make_random_dual_encoder,
)

__all__ = [
    "DiffusionParity",
    "check_diffusion_parity",
    "make_random_diffusers_model",
    "AudioParity",
    "check_audio_parity",
    "make_random_audio_model",
    "random_audio_batch",
    "OnnxSpeechToText",
    "check_speech_to_text_parity",
    "ZeroShotParity",
    "check_zero_shot_parity",
    "make_random_dual_encoder",
    "OnnxCrossAttentionVL",
    "OnnxVisionLanguage",
    "check_cross_attention_vl_parity",
    "check_vision_language_parity",
    "tiny_tokenizer",
    "VisionParity",
    "check_vision_parity",
    "make_random_vision_model",
    "random_pixels",
    "SMOLLM2_GGUF",
    "OnnxSeq2Seq",
    "Seq2SeqParity",
    "check_seq2seq_parity",
    "make_random_seq2seq",
    "EncoderParity",
    "check_encoder_parity",
    "make_random_encoder",
    "right_padded_batch",
    "genai_greedy",
    "write_gguf",
    "torch_greedy",
    "smollm2_gguf",
    "write_smollm2_checkpoint",
    "TINY_LLAMA_CONFIG",
    "tiny_llama_shapes",
    "tiny_llama_tensors",
    "write_tiny_llama",
    "CausalLMParity",
    "OnnxCausalLM",
    "build_with_cli",
    "check_causal_lm_parity",
    "left_padded_batch",
    "make_random_model",
    "module_graph",
    "perturb_parameters",
    "run_module",
]
