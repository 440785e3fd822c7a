"""MarkupLM: BERT with RoBERTa's positions plus the embeddings of each token's XPath."""

from mobius.testing import random_ids

DEPTH, TAGS, SUBS = 3, 20, 30
XPATHS = {
    "xpath_tags_seq": random_ids(*[TAGS] * DEPTH),
    "xpath_subs_seq": random_ids(*[SUBS] * DEPTH),
}
MARKUPLM = dict(
    max_depth=DEPTH,
    xpath_unit_hidden_size=8,
    max_xpath_tag_unit_embeddings=TAGS,
    max_xpath_subs_unit_embeddings=SUBS,
    type_vocab_size=2,
)

CASES = {
    "markuplm": (
        "markuplm",
        MARKUPLM,
        {
            "heads": ("none", "sequence-classification", "token-classification"),
            "extra_inputs": XPATHS,
        },
    ),
    "markuplm-answers": (
        "markuplm",
        MARKUPLM,
        {"heads": ("question-answering",), "eps": ("default",), "extra_inputs": XPATHS},
    ),
}
