"""What most vision–language cases share: the tiny towers and decoders (a family changes a
field), the config maker over them, and the images-only processors' mixin."""

from transformers import AutoConfig

TOWER = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)
CLIP = dict(TOWER, model_type="clip_vision_model")
SIGLIP = dict(TOWER, model_type="siglip_vision_model")
TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=256,
)
LLAMA = dict(TEXT, model_type="llama")
COHERE2 = dict(
    TEXT,
    model_type="cohere2",
    num_hidden_layers=4,  # three sliding layers, one full
    sliding_window=8,  # shorter than the prompts
    logit_scale=0.5,  # transformers' VL heads ignore it
)


def vl_config(model_type: str, vision: dict, text: dict, **fields):
    """A case's ``make_config``: the transformers config of ``model_type`` over copies of the
    ``vision`` and ``text`` dicts, with ``fields`` (the image token's id...)."""

    def make():
        return AutoConfig.for_model(
            model_type, vision_config=dict(vision), text_config=dict(text), **fields
        )

    return make


class VideoProcessorOptional:
    """Mixed in before a processor class: it is made without its video processor
    (transformers' video processors need torchvision, which is not installed); images go
    through the processor's own code."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and argument is None:
            return None
        return super().check_argument_for_proper_class(argument_name, argument)
