"""InstructBLIP over OPT: BLIP-2's layout, the instruction (padded, in the Q-Former's own
vocabulary) joining the queries in the Q-Former."""

from transformers import InstructBlipProcessor

from mobius.testing import tiny_tokenizer

from .blip_2 import IMAGE_TOKEN_ID, OPTIONS, QFORMER, blip_config, image_processor


def instructblip_processor(config):
    qformer = config.qformer_config
    return InstructBlipProcessor(
        image_processor=image_processor(config),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        qformer_tokenizer=tiny_tokenizer(qformer.vocab_size, {}),
        num_query_tokens=config.num_query_tokens,
    )


CASES = {
    "instructblip-opt": (
        "instructblip",
        blip_config("instructblip", QFORMER),
        instructblip_processor,
        OPTIONS,
    ),
    "instructblip-opt-3-layers-cross-every-other": (
        "instructblip",
        blip_config(
            "instructblip", dict(QFORMER, num_hidden_layers=3, cross_attention_frequency=2)
        ),
        instructblip_processor,
        OPTIONS,
    ),
}
