"""AST: a ViT over fbank patches with CLS and distillation tokens, bare and classifying.

The inputs are transformers' own ``ASTFeatureExtractor`` frames of two clips
(0.6 s and 0.3 s: 58 and 28 frames) in a 50-frame window: one is cut, one padded.
Patches of 8 with strides 6 (frequency) and 5 (time) overlap and leave a remainder.
"""

from transformers import ASTFeatureExtractor

AST = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    patch_size=8,
    frequency_stride=6,
    time_stride=5,
    max_length=50,
    num_mel_bins=20,
    num_labels=3,
    layer_norm_eps=1e-6,
)

CASES = {
    "audio-spectrogram-transformer": (
        "audio-spectrogram-transformer",
        AST,
        dict(
            heads=("none", "sequence-classification"),
            lengths=(9600, 4800),
            masks=(False,),
            feature_extractor=ASTFeatureExtractor(num_mel_bins=20, max_length=50),
        ),
    ),
}
