"""OneFormer over a transformers ResNet, Swin (at a size no stage's window divides) and
ConvNeXt (four maps, strides 4 to 32), every task's ``task_inputs`` on a batch of two images
(each pair of tasks, see the kit), with and without the task norm, one and two
query-transformer layers."""

from .mask2former import RESNET  # four stages: strides 4 to 32, OneFormer's ``strides``

#: transformers' ConvNeXt (real checkpoints' other backbone besides Swin), four stages.
CONVNEXT = dict(
    model_type="convnext",
    hidden_sizes=[8, 16, 24, 32],
    depths=[1, 1, 1, 1],
    out_features=["stage1", "stage2", "stage3", "stage4"],
)
#: transformers' SwinBackbone (most real checkpoints'), four stages out; window 4 on a 12x18
#: patch grid (48x72 pixels): the stages (12x18, 6x9, 3x5, 2x3) are padded to whole windows.
SWIN = dict(
    model_type="swin",
    embed_dim=8,
    depths=[2, 1, 1, 2],
    num_heads=[1, 1, 2, 2],
    window_size=4,
    out_features=["stage1", "stage2", "stage3", "stage4"],
)
ONEFORMER = dict(
    backbone_config=RESNET,
    conv_dim=32,  # GroupNorm(32)
    mask_dim=32,
    hidden_dim=32,
    encoder_feedforward_dim=32,
    dim_feedforward=32,
    encoder_layers=1,
    decoder_layers=3,
    query_dec_layers=1,
    num_attention_heads=2,
    num_queries=5,
    num_labels=3,
    task_seq_len=8,
    init_std=1.0,  # transformers' 0.02 leaves every query's class and mask nearly the same
)
OPTIONS = dict(
    model_class="OneFormerForUniversalSegmentation", tasks=("semantic", "instance", "panoptic")
)

CASES = {
    "oneformer-resnet": ("oneformer", ONEFORMER, dict(OPTIONS, image_size=(64, 64))),
    "oneformer-swin": (
        "oneformer",
        dict(ONEFORMER, backbone_config=SWIN),
        dict(OPTIONS, image_size=(48, 72), eps=("default",)),
    ),
    # ConvNeXt, two query-transformer layers, four masked-attention layers, no task norm
    # (the query transformer then starts from zeros), a 64x96 image.
    "oneformer-convnext-no-task-norm": (
        "oneformer",
        dict(
            ONEFORMER,
            backbone_config=CONVNEXT,
            query_dec_layers=2,
            decoder_layers=5,
            use_task_norm=False,
        ),
        dict(OPTIONS, image_size=(64, 96), eps=("default",)),  # the ResNet case runs cpu too
    ),
}
