"""DPT semantic segmentation: the projected readout, an auxiliary head left unread, a
processor size other than the config's (the positions resized), a batch-normed fusion."""

from depth_parity_cases.dpt import DPT

CASES = {
    "dpt-segmentation-auxiliary-head": (
        "dpt",
        dict(DPT, num_labels=3, use_auxiliary_head=True, initializer_range=0.5),
        dict(image_size=(40, 40), model_class="DPTForSemanticSegmentation"),
    ),
    "dpt-segmentation-add-readout-batch-norm": (
        "dpt",
        dict(
            DPT,
            num_labels=4,
            use_auxiliary_head=False,
            readout_type="add",
            use_batch_norm_in_fusion_residual=True,
            initializer_range=0.5,
        ),
        dict(image_size=(24, 24), model_class="DPTForSemanticSegmentation"),
    ),
}
