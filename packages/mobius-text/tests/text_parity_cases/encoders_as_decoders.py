"""Encoder families run as decoders (``is_decoder=True``): transformers' ``BertLMHeadModel`` and
``*ForCausalLM`` classes, causal self-attention over a KV cache and the masked-LM head."""

DECODER = dict(is_decoder=True)

CASES = {
    "bert-lm-head": ("bert", DECODER, {"model_class": "BertLMHeadModel"}),
    "roberta-causal": ("roberta", DECODER, {"model_class": "RobertaForCausalLM"}),
    "xlm-roberta-causal": ("xlm-roberta", DECODER, {"model_class": "XLMRobertaForCausalLM"}),
    "camembert-causal": ("camembert", DECODER, {"model_class": "CamembertForCausalLM"}),
    "data2vec-text-causal": (
        "data2vec-text",
        DECODER,
        {"model_class": "Data2VecTextForCausalLM"},
    ),
    "ernie-causal": (
        "ernie",
        dict(DECODER, use_task_id=True, task_type_vocab_size=3),
        {"model_class": "ErnieForCausalLM"},
    ),
    "megatron-bert-causal": ("megatron-bert", DECODER, {"model_class": "MegatronBertForCausalLM"}),
    "rembert-causal": (
        "rembert",
        dict(DECODER, input_embedding_size=16, output_embedding_size=24, bos_token_id=2),
        {"model_class": "RemBertForCausalLM"},
    ),
    "roberta-prelayernorm-causal": (
        "roberta-prelayernorm",
        DECODER,
        {"model_class": "RobertaPreLayerNormForCausalLM"},
    ),
    "xlm-roberta-xl-causal": (
        "xlm-roberta-xl",
        DECODER,
        {"model_class": "XLMRobertaXLForCausalLM"},
    ),
    # narrow embeddings widened by embeddings_project; the generator's head
    "electra-causal": (
        "electra",
        dict(DECODER, embedding_size=32),
        {"model_class": "ElectraForCausalLM"},
    ),
    # block_sparse (the default): a decoder with a cache attends in full all the same
    "big-bird-causal": (
        "big_bird",
        dict(DECODER, rescale_embeddings=True),
        {"model_class": "BigBirdForCausalLM"},
    ),
    # rotary positions from the cache's length; values rotated too; narrow embeddings
    "roformer-causal": (
        "roformer",
        dict(DECODER, rotary_value=True, embedding_size=32),
        {"model_class": "RoFormerForCausalLM"},
    ),
    # the second adapter is the default language: the graph picks it by name
    "xmod-causal": (
        "xmod",
        dict(DECODER, languages=["en_XX", "de_DE"], default_language="de_DE", pre_norm=True),
        {"model_class": "XmodForCausalLM"},
    ),
}
