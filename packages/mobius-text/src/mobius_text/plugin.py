"""mobius-text's slice beyond its model types: tasks, source recognisers, CLI options, runners.

Registered lazily (``"module:attribute"`` strings): registering imports nothing.
"""

from __future__ import annotations

PACKAGE = "mobius-text"


def register_slice(registry) -> None:
    """Register what mobius-text owns besides its model types (safe to call twice).

    Two source recognisers: a llama.cpp ``.gguf`` file (config, weights and
    tokenizer of the families llama.cpp converts), and a sentence-transformers
    directory (``modules.json``: the embedding head, pooling and normalisation).
    The ``text-encoder`` task (a decoder's token states for diffusion pipelines)
    and its ``--hidden-states`` option.
    """
    from mobius.plugins import CliOption, SourceInfo, TaskInfo

    registry.register_source(SourceInfo("gguf", "mobius_text.gguf._source:recognise", PACKAGE))
    registry.register_source(
        SourceInfo(
            "sentence-transformers",
            "mobius_text.sentence_transformers:recognise",
            PACKAGE,
        )
    )
    registry.register_task(
        TaskInfo(
            "text-encoder",
            "mobius_text.text_encoder:TextEncoderTask",
            PACKAGE,
            validate="mobius_text.text_encoder:validate_text_encoder",
        )
    )
    registry.register_option(
        CliOption(
            "build",
            "hidden_states",
            ("--hidden-states",),
            dict(
                default=None,
                metavar="I,J|all",
                help="decoders built as text encoders (config.json architectures LlamaModel, "
                "Gemma2Model, Qwen2Model, Qwen3Model or GlmModel; a causal LM, a Qwen2.5-VL or a "
                "Mistral 3 folder with --model-type LlamaModel..., Qwen2_5_VLTextModel or "
                "Mistral3TextModel): also output "
                "transformers' hidden_states[I] as hidden_states.I (0: the embeddings, the "
                "layer count: the last state; a negative I counts from the end, the output "
                "named by the index it resolves to), or all of them. Example: mobius build "
                "--model lumina2/text_encoder te/ --hidden-states -2",
            ),
            tasks=("text-encoder", "image-text-encoder"),  # the latter: mobius-vision's
            package=PACKAGE,
        )
    )
