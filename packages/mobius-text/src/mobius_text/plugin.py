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
    """
    from mobius.plugins import SourceInfo

    registry.register_source(SourceInfo("gguf", "mobius_text.gguf._source:recognise", PACKAGE))
    registry.register_source(
        SourceInfo(
            "sentence-transformers",
            "mobius_text.sentence_transformers:recognise",
            PACKAGE,
        )
    )
