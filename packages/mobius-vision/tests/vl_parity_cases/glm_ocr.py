"""GLM-OCR: GLM-4.1V's contract and processor over a tower without a position table (q/k
norms, biased attention and MLP) and a decoder without q/k/v biases.

transformers ships no GLM-OCR processor: the checkpoints name GLM-4.1V's, used here as
in ``vl_parity_cases/glm4v.py`` (two image sizes, the same prompts). The first case sets
the decoder's ``head_dim`` apart from ``hidden / heads`` (transformers' GLM-OCR reads it;
GLM-4.1V's does not); the second drops every tower bias (``attention_bias``), names no
``partial_rotary_factor`` (full rotary) and ties the head.
"""

from vl_parity_cases.glm4v import OPTIONS, TEXT, VISION, glm4v_config, glm4v_processor

OCR_TEXT = dict(
    TEXT,
    model_type="glm_ocr_text",
    head_dim=24,  # 12 rotary channels: 6 pairs
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 2, 2],
    },
)
OCR_VISION = dict(VISION, model_type="glm_ocr_vision", attention_bias=True)

CASES = {
    "glm_ocr-biased-head-dim": (
        "glm_ocr",
        glm4v_config(OCR_VISION, OCR_TEXT, model_type="glm_ocr"),
        glm4v_processor,
        OPTIONS,
    ),
    "glm_ocr-unbiased-full-rotary-tied": (
        "glm_ocr",
        glm4v_config(
            dict(OCR_VISION, attention_bias=False, hidden_act="gelu"),
            dict(
                OCR_TEXT,
                head_dim=16,
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 500.0,
                    "mrope_section": [2, 3, 3],
                },
            ),
            model_type="glm_ocr",
            tie_word_embeddings=True,
        ),
        glm4v_processor,
        OPTIONS,
    ),
}
