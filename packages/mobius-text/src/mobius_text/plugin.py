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
    from mobius.plugins import CliOption, CommandInfo, RunnerInfo, SourceInfo, TaskInfo

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
    registry.register_task(
        TaskInfo(
            "text-classification",
            "mobius_text.text_classification:TextClassificationTask",
            PACKAGE,
            ("sequence-classification",),
            validate="mobius_text.text_classification:validate_text_classification",
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
    registry.register_option(
        CliOption(
            "build",
            "score_tokens",
            ("--score-tokens",),
            dict(
                default=None,
                metavar="YES,NO",
                help="decoders built as text encoders (--model-type Qwen3Model...): a yes/no "
                "reranker, logits [batch, 1] = logit(YES) - logit(NO) at the last token "
                "(sentence-transformers' LogitScore; its sigmoid is Qwen3-Reranker's yes "
                "probability); a CrossEncoder directory's LogitScore gives them. Run it with "
                "mobius rerank. Example: mobius build --model qwen3-reranker/ out/ --model-type "
                "Qwen3Model --score-tokens yes,no",
            ),
            tasks=("text-encoder",),
            package=PACKAGE,
        )
    )
    registry.register_command(
        CommandInfo(
            "rerank",
            "rank documents against a query with a built reranker (cross-encoder)",
            "The first TEXT is the query, the others the documents: score each document\n"
            "against the query with the reranker package in OUTPUT_DIR (a BERT-style\n"
            "cross-encoder, or a decoder built with --score-tokens) in ONNX Runtime, as\n"
            "sentence-transformers' CrossEncoder.predict does, and print the documents best\n"
            "first, one JSON line each (index, document, score). A tokenizer with a chat\n"
            "template renders each pair as CrossEncoder does (roles query and document);\n"
            "otherwise an instruction or prompt the model expects (Qwen3-Reranker's) is the\n"
            "user's to put in the texts.",
            PACKAGE,
            inputs_metavar="TEXT",
            inputs_help="the query, then each document to rank",
            examples=(
                'mobius rerank reranker-out/ "Where is Paris?" "Paris is in France." '
                '"Bananas are yellow."',
            ),
        )
    )
    registry.register_runner(
        RunnerInfo(
            "reranker",
            accepts="mobius_text.rerank:is_reranker",
            run="mobius_text.rerank:run_cli",
            package=PACKAGE,
            command="rerank",
        )
    )
