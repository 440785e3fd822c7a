"""A tiny random Flux.2 Klein pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_flux2_klein_pipeline` saves a diffusers
``Flux2KleinPipeline`` (float32, eval) with ``save_pretrained`` and returns it. The text
encoder is a whole ``Qwen3ForCausalLM`` of 28 layers (the pipeline reads layers 9, 18 and
27); the tokenizer is word-level with Qwen's chat tokens and a chat template that, as
Qwen3's, closes an empty thinking block when thinking is off.
:func:`make_flux2_pipeline` saves a ``Flux2Pipeline`` (FLUX.2 dev): a whole
``Mistral3ForConditionalGeneration`` of 31 layers (layers 10, 20 and 30 read) behind a
``PixtralProcessor`` whose tokenizer, as Mistral's, adds ``<s>`` and whose chat template,
as Mistral Small's, puts ``<s>`` first and reads structured content.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import WORDS, _perturbed

TEXT_WIDTH = 16
#: black-forest-labs/FLUX.2-klein's scheduler/scheduler_config.json: its fields that differ
#: from FlowMatchEulerDiscreteScheduler's defaults.
HUB_SCHEDULER = dict(use_dynamic_shifting=True, shift=3.0)
#: Qwen3's template, cut to what a one-turn prompt without tools reads.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def tiny_qwen3_tokenizer():
    """Word-level: <|endoftext|> 0 (the pad), the chat and thinking tokens, newline, the
    roles, then :data:`WORDS`; right padding."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
    vocab = {"<|endoftext|>": 0, "<unk>": 1, **{t: 2 + i for i, t in enumerate(special)}}
    for piece in ("\n", "user", "assistant", *WORDS):
        vocab.setdefault(piece, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(" +"), behavior="removed"),
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
        ]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(special),
        padding_side="right",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen3(vocab_size: int):
    """A 28-layer Qwen3 causal LM (grouped KV heads, q/k norms) of width :data:`TEXT_WIDTH`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=TEXT_WIDTH,
        intermediate_size=32,
        num_hidden_layers=28,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        bos_token_id=0,
        eos_token_id=3,
        pad_token_id=0,
    )
    return Qwen3ForCausalLM._from_config(config, attn_implementation="eager")


def make_flux2_klein_pipeline(directory: Path):
    """A tiny ``Flux2KleinPipeline`` saved into ``directory``: a 1+2-layer transformer over
    4x 4-channel patchified latents, a VAE that halves space once with batch-norm statistics
    far from 0 and 1, the hub's scheduler config."""
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_qwen3_tokenizer()
    text_encoder = tiny_qwen3(len(tokenizer))
    transformer = Flux2Transformer2DModel(
        in_channels=16,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=3 * TEXT_WIDTH,
        timestep_guidance_channels=32,
        axes_dims_rope=[4, 4, 4, 4],
        guidance_embeds=False,
    )
    vae = AutoencoderKLFlux2(
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        block_out_channels=[8, 16],
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
    )
    _perturbed(text_encoder, transformer, vae)
    with torch.no_grad():  # statistics a pipeline that ignored them would visibly miss
        vae.bn.running_mean.copy_(torch.linspace(-0.5, 0.5, 16))
        vae.bn.running_var.copy_(torch.linspace(0.3, 2.0, 16))
    pipe = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


#: Mistral Small's template cut to a system turn and user turns of text blocks: ``<s>`` first,
#: the system text in ``[SYSTEM_PROMPT]``, each user turn's blocks in ``[INST]``.
MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}[SYSTEM_PROMPT]"
    "{{ message['content'][0]['text'] }}[/SYSTEM_PROMPT]"
    "{% elif message['role'] == 'user' %}[INST]"
    "{% for block in message['content'] %}{% if block['type'] == 'text' %}"
    "{{ block['text'] }}{% else %}[IMG]{% endif %}{% endfor %}[/INST]"
    "{% endif %}{% endfor %}"
)
MISTRAL_CONTROL = ("[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")
PIXTRAL_IMAGE = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")
PIXTRAL_IMAGE_ID = 4 + len(MISTRAL_CONTROL)  # [IMG]'s id in :func:`tiny_pixtral_processor`


def tiny_pixtral_processor():
    """A ``PixtralProcessor``: a word-level tokenizer (<unk> 0, <s> 1, </s> 2, <pad> 3, the
    control and image tokens, the words of diffusers' Flux.2 system message and
    :data:`WORDS`) that adds ``<s>`` to each text and pads on the right."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PixtralImageProcessor, PixtralProcessor, PreTrainedTokenizerFast

    special = (*MISTRAL_CONTROL, *PIXTRAL_IMAGE)
    vocab = {t: i for i, t in enumerate(("<unk>", "<s>", "</s>", "<pad>", *special))}
    for word in (*SYSTEM_MESSAGE.split(), *WORDS):
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )  # as Mistral's tokenizer: a BOS on every text unless add_special_tokens=False
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=list(special),
        padding_side="right",
    )
    return PixtralProcessor(
        image_processor=PixtralImageProcessor(patch_size=4, size={"longest_edge": 16}),
        tokenizer=tokenizer,
        patch_size=4,
        spatial_merge_size=2,
        chat_template=MISTRAL_CHAT_TEMPLATE,
    )


def tiny_mistral3(vocab_size: int):
    """A ``Mistral3ForConditionalGeneration``: a 31-layer Mistral of width :data:`TEXT_WIDTH`
    (grouped KV heads, an untied head, no window as Mistral Small's) and a one-layer Pixtral
    vision tower with its projector, which the text encoder leaves out."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    text = dict(
        model_type="mistral",
        vocab_size=vocab_size,
        hidden_size=TEXT_WIDTH,
        intermediate_size=32,
        num_hidden_layers=31,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    vision = dict(
        model_type="pixtral",
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        head_dim=8,
        patch_size=4,
        image_size=16,
    )
    config = Mistral3Config(
        text_config=text,
        vision_config=vision,
        image_token_index=PIXTRAL_IMAGE_ID,
        tie_word_embeddings=False,
    )
    return Mistral3ForConditionalGeneration._from_config(config, attn_implementation="eager")


def make_flux2_pipeline(directory: Path):
    """A tiny ``Flux2Pipeline`` saved into ``directory``: Klein's transformer with the guidance
    embedding, its VAE and statistics, the Mistral 3 text encoder and Pixtral processor."""
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2Pipeline,
        Flux2Transformer2DModel,
    )

    torch.manual_seed(0)
    processor = tiny_pixtral_processor()
    text_encoder = tiny_mistral3(len(processor.tokenizer))
    transformer = Flux2Transformer2DModel(
        in_channels=16,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=3 * TEXT_WIDTH,
        timestep_guidance_channels=32,
        axes_dims_rope=[4, 4, 4, 4],
        guidance_embeds=True,
    )
    vae = AutoencoderKLFlux2(
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        block_out_channels=[8, 16],
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
    )
    _perturbed(text_encoder, transformer, vae)
    with torch.no_grad():  # statistics a pipeline that ignored them would visibly miss
        vae.bn.running_mean.copy_(torch.linspace(-0.5, 0.5, 16))
        vae.bn.running_var.copy_(torch.linspace(0.3, 2.0, 16))
    pipe = Flux2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=processor,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
