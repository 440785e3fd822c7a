"""mobius-vision's tasks: the I/O contracts of vision encoders and vision–language models.

- ``image-classification`` (:mod:`.image_classification`): a vision encoder's
  features and, with ``--head image-classification``, class logits;
- ``zero-shot-image-classification`` (:mod:`.zero_shot`): a dual encoder's
  image–text similarity;
- ``vision-language`` (:mod:`.vision_language`): image features merged into a
  text decoder's embeddings, split into three graphs or as one (``--form``);
- ``audio-vision-language`` (:mod:`.audio_vision_language`): the same with an
  ``audio/`` graph beside ``vision/`` whose features fill the audio placeholders
  (the Qwen2.5-Omni and Qwen3-Omni thinkers);
- ``cross-attention-vision-language`` (:mod:`.cross_attention_vl`): a decoder
  that cross-attends to the image's cache (Mllama);
- ``image-to-text`` (:mod:`.image_to_text`): an encoder–decoder whose source is an
  image (TrOCR, Donut): core's seq2seq contract over pixels;
- ``mask-generation`` (:mod:`.mask_generation`): promptable masks (Segment
  Anything), an ``image_encoder/`` and a ``prompt_decoder/`` graph;
- ``object-detection`` (:mod:`.object_detection`): class logits and boxes per
  object query (DETR and its family, YOLOS), ``pixel_mask`` where the family pads.

:mod:`mobius_vision.plugin` registers them by name, lazily: nothing here is
imported until a build asks for one.
"""
