"""MiniCPM-OCR: MiniCPM-V 4.6's case under ``minicpm_ocr`` at its default ``"4x"`` (no window
merger, four times the tokens), tied embeddings.

transformers' ``MiniCPMOcrImageProcessor`` is a torchvision class (not installed here):
the real ``MiniCPMOcrProcessor`` runs over MiniCPM-V 4.6's PIL image processor at ``"4x"``,
which cuts and sizes the slices as the OCR one does with its default
``small_image_upsize="always"``.
"""

from transformers import MiniCPMOcrProcessor

from .minicpmv4_6 import (
    OPTIONS,
    Int64TargetSizes,
    MiniCPMProcessorMaker,
    VideoProcessorUnchecked,
    minicpm_config,
)


class ImageMiniCPMOcrProcessor(Int64TargetSizes, VideoProcessorUnchecked, MiniCPMOcrProcessor):
    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "image_processor":  # 4.6's PIL class (module docstring)
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


class MiniCPMOcrProcessorMaker(MiniCPMProcessorMaker):
    processor_class = ImageMiniCPMOcrProcessor


CASES = {
    "minicpm_ocr-4x-tied": (
        "minicpm_ocr",
        minicpm_config("minicpm_ocr"),
        MiniCPMOcrProcessorMaker(),
        OPTIONS,
    ),
}
