"""GLM-4.6V and GLM-GA: GLM-4.1V's class with the decoder its text config names, through the
real ``Glm46VProcessor``.

``glm46v`` over GLM-4.1V's dense ``glm4v_text`` (GLM-4.6V-Flash) and over GLM-4.5V's
``glm4v_moe_text`` (GLM-4.6V, with GLM-4.5V's ``glm4v_moe_vision`` tower config): the
decoder class changes with the config, so each has a case. ``glmga`` is the same model
under another config name, through GLM-GA's PIL image processor (which, unlike its
torchvision one, does not read ``patch_expand_factor``). Tiny sizes, images and prompts
are GLM-4.1V's case's (``vl_parity_cases/glm4v.py``).
"""

from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil
from transformers.models.glm46v.processing_glm46v import Glm46VProcessor
from transformers.models.glmga.image_processing_pil_glmga import GlmgaImageProcessorPil

from vl_parity_cases._tiny import VideoProcessorOptional
from vl_parity_cases.glm4v import OPTIONS, TEXT, VISION, glm4v_config, glm4v_processor
from vl_parity_cases.glm4v_moe import MOE_TEXT


class ImageGlm46VProcessor(VideoProcessorOptional, Glm46VProcessor):
    """Glm46VProcessor over images only."""


def processor_over(image_processor_class):
    """A case's ``make_processor``: GLM-4.1V's case's settings and tokenizer, the real
    processor over ``image_processor_class``."""

    def make(config):
        glm4v = glm4v_processor(config)
        settings = ("size", "patch_size", "temporal_patch_size", "merge_size")
        image_processor = image_processor_class(
            **{name: getattr(glm4v.image_processor, name) for name in settings}
        )
        return ImageGlm46VProcessor(image_processor=image_processor, tokenizer=glm4v.tokenizer)

    return make


glm46v_processor = processor_over(Glm46VImageProcessorPil)
glmga_processor = processor_over(GlmgaImageProcessorPil)

CASES = {
    "glm46v-dense-two-sizes": (
        "glm46v",
        glm4v_config(model_type="glm46v"),
        glm46v_processor,
        OPTIONS,
    ),
    "glm46v-moe-two-sizes": (
        "glm46v",
        glm4v_config(dict(VISION, model_type="glm4v_moe_vision"), MOE_TEXT, model_type="glm46v"),
        glm46v_processor,
        OPTIONS,
    ),
    "glmga-dense-two-sizes": (
        "glmga",
        glm4v_config(VISION, TEXT, model_type="glmga"),
        glmga_processor,
        OPTIONS,
    ),
}
