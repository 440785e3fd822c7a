"""mobius-audio's slice beyond its model types: tasks, source recognisers, CLI options, runners.

- tasks: ``speech-to-text`` and ``audio-feature-extraction`` (:mod:`mobius_audio.tasks`);
- the ``mobius generate`` runner of speech-to-text packages (:mod:`mobius_audio.generate`):
  it transcribes an audio file (WAV, FLAC, OGG, MP3), and its options ``--timestamps``,
  ``--language`` and ``--task`` (Whisper packages);
- the runners of audio encoders with a head (:mod:`mobius_audio.encoders`): ``mobius
  generate`` transcribes with a CTC package, ``mobius classify`` runs an audio classifier;
- the frame-classification (diarization) and x-vector heads (:mod:`mobius_audio.speaker_heads`):
  ``mobius classify`` prints a frame classifier's segments, ``mobius speaker`` compares
  speakers by their x-vectors;
- ``zero-shot-audio-classification`` (:mod:`mobius_audio.tasks_zero_shot`) and its
  ``mobius classify --labels`` runner (:mod:`mobius_audio.zero_shot_audio`): CLAP.

Everything is named by lazy ``"module:attribute"`` strings: registering imports nothing.
"""

from __future__ import annotations

from mobius.plugins import CliOption, RunnerInfo, TaskInfo

PACKAGE = "mobius-audio"

TASKS = {
    "speech-to-text": "SpeechToTextTask",
    "audio-feature-extraction": "AudioFeatureExtractionTask",
}
#: Each task's ``mobius build --validate`` check (:mod:`mobius_audio.validate`).
VALIDATORS = {
    "speech-to-text": "validate_speech_to_text",
    "audio-feature-extraction": "validate_audio_feature_extraction",
}

GROUP = "speech-to-text packages (Whisper)"

RUNNER_HELP = (
    "A speech-to-text package (Whisper, Speech2Text, Moonshine, SpeechT5: an encoder over\n"
    "audio) takes an audio file for PROMPT: WAV, FLAC, OGG or MP3, channels averaged and\n"
    "resampled to the model's rate (pip install mobius-audio[run]). Whisper decodes as\n"
    "transformers' Whisper generate does: audio longer than 30 s in consecutive\n"
    "30 s windows, each moving on to the last timestamp pair it closed (with the text\n"
    "sent to a file, a bar on stderr shows the progress); the language is detected\n"
    "once unless --language gives it; --max-new-tokens counts per window. SeamlessM4T\n"
    "translates into the --language it is given (mobius-audio)."
)

OPTIONS = (
    (
        "timestamps",
        ("--timestamps",),
        dict(
            action="store_true",
            default=None,
            help="print one '[start -> end] text' line per segment (times in seconds), "
            "decoding with Whisper's timestamp tokens",
        ),
    ),
    (
        "language",
        ("--language",),
        dict(
            default=None,
            metavar="LANG",
            help="Whisper: the spoken language: a code (de), a name (german) or a token (<|de|>); "
            "default: the package's generation config, else detected from the first 30 s. "
            "SeamlessM4T: the language to translate into (fra, eng, ...), required",
        ),
    ),
    (
        "speech_task",
        ("--task",),
        dict(
            choices=["transcribe", "translate"],
            default=None,
            help="transcribe in the spoken language, or translate to English "
            "(default: the package's generation config: transcribe)",
        ),
    ),
)

CTC_HELP = (
    "An audio encoder built from a *ForCTC checkpoint (wav2vec2, HuBERT, WavLM, Parakeet...)\n"
    "transcribes the audio file given for PROMPT: the package's feature extractor\n"
    "normalises the samples, each frame's likeliest token is kept and the CTC\n"
    "tokenizer collapses repeats and blanks, as transformers' speech-recognition\n"
    "pipeline does; decoding is greedy (mobius-audio)."
)

AUDIO_CLASSIFIER_HELP = (
    "An audio encoder built from a *ForSequenceClassification checkpoint scores each\n"
    "audio file (WAV, FLAC, OGG, MP3) over config.json's labels with a softmax, as\n"
    "transformers' audio-classification pipeline does (mobius-audio)."
)

ZERO_SHOT_AUDIO_HELP = (
    "A zero-shot audio package (CLAP) scores each audio file against the --labels given,\n"
    'as "This is a sound of {label}.": a softmax over the labels, as the transformers\n'
    "zero-shot-audio-classification pipeline scores them. Features come from the package's\n"
    "preprocessor_config.json in numpy; a clip longer than its max_length_s is cut at a\n"
    "random offset (fused packages: three random crops fused with the whole), as\n"
    "transformers does (mobius-audio)."
)


def register_slice(registry) -> None:
    """Register what mobius-audio owns besides its model types (safe to call twice)."""
    for name, task in TASKS.items():
        validate = f"mobius_audio.validate:{VALIDATORS[name]}"
        registry.register_task(
            TaskInfo(name, f"mobius_audio.tasks:{task}", PACKAGE, validate=validate)
        )
    # CLAP's zero-shot audio classification has its own task module (tasks_zero_shot).
    registry.register_task(
        TaskInfo(
            "zero-shot-audio-classification",
            "mobius_audio.tasks_zero_shot:ZeroShotAudioClassificationTask",
            PACKAGE,
            validate="mobius_audio.validate:validate_zero_shot_audio",
        )
    )
    for dest, flags, kwargs in OPTIONS:
        registry.register_option(
            CliOption("generate", dest, flags, kwargs, group=GROUP, package=PACKAGE)
        )
    registry.register_runner(
        RunnerInfo(
            "speech-to-text",
            accepts="mobius_audio.generate:is_speech_package",
            run="mobius_audio.generate:run_cli",
            package=PACKAGE,
            help=RUNNER_HELP,
            examples=(
                "mobius generate whisper-out/ speech.wav",
                "mobius generate whisper-out/ lecture.mp3 --timestamps --language de",
                "mobius generate whisper-out/ interview.flac --task translate",
                "mobius generate seamless-out/ speech.wav --language fra",
            ),
        )
    )
    # Audio encoders with a head (mobius_audio.encoders): CTC transcribes, a classifier classifies.
    registry.register_runner(
        RunnerInfo(
            "ctc",
            accepts="mobius_audio.encoders:is_audio_encoder_package",
            run="mobius_audio.encoders:run_generate_cli",
            package=PACKAGE,
            help=CTC_HELP,
            examples=("mobius generate wav2vec2-out/ speech.wav",),
        )
    )
    registry.register_runner(
        RunnerInfo(
            "zero-shot-audio-classifier",
            accepts="mobius_audio.zero_shot_audio:is_zero_shot_audio_package",
            run="mobius_audio.zero_shot_audio:run_cli",
            package=PACKAGE,
            help=ZERO_SHOT_AUDIO_HELP,
            examples=('mobius classify clap-out/ dog.wav --labels "dog barking,rain"',),
            command="classify",
        )
    )
    # Before audio-classifier, which accepts every audio encoder (mobius_audio.speaker_heads).
    register_speaker_heads(registry)
    registry.register_runner(
        RunnerInfo(
            "audio-classifier",
            accepts="mobius_audio.encoders:is_audio_encoder_package",
            run="mobius_audio.encoders:run_classify_cli",
            package=PACKAGE,
            help=AUDIO_CLASSIFIER_HELP,
            examples=("mobius classify audio-classifier-out/ speech.wav birds.flac --top 3",),
            command="classify",
        )
    )
    register_codec(registry)
    register_text_to_audio(registry)


CODEC_HELP = (
    "An audio-codec package (DAC, EnCodec) encodes each audio file (WAV, FLAC, OGG, MP3;\n"
    "channels averaged, resampled to the codec's rate) to discrete codes, one per quantizer\n"
    "stage and frame, and decodes them back, as transformers' DacModel and EncodecModel\n"
    "encode and decode do. Writes the decoded audio as a 32-bit float WAV and prints the\n"
    "codes' shape; --codes also saves them (int64 [codebooks, frames], .npy). By default\n"
    "every stage is kept (the highest bitrate); --codebooks K keeps the first K, and an\n"
    "EnCodec's --bandwidth (kbps, one of its target_bandwidths) the stages of that bitrate\n"
    "(mobius-audio)."
)

CODEC_OPTIONS = (
    (
        "codec_output",
        ("--output",),
        dict(
            default=None,
            metavar="WAV",
            help="where the decoded audio of the (one) input goes; "
            "default <input stem>.decoded.wav in the current folder",
        ),
    ),
    (
        "codec_codes",
        ("--codes",),
        dict(default=None, metavar="NPY", help="also save the codes (int64 [codebooks, frames])"),
    ),
    (
        "codec_codebooks",
        ("--codebooks",),
        dict(
            type=int,
            default=None,
            metavar="K",
            help="keep the first K quantizer stages (default: all of them)",
        ),
    ),
    (
        "codec_bandwidth",
        ("--bandwidth",),
        dict(
            type=float,
            default=None,
            metavar="KBPS",
            help="EnCodec: keep the stages of this bitrate, one of config.json's target_bandwidths",
        ),
    ),
)


def register_codec(registry) -> None:
    """The ``audio-codec`` task and ``mobius codec`` (:mod:`mobius_audio.codec_runner`)."""
    from mobius.plugins import CommandInfo

    registry.register_task(
        TaskInfo(
            "audio-codec",
            "mobius_audio.tasks_codec:AudioCodecTask",
            PACKAGE,
            validate="mobius_audio.codec_validate:validate_audio_codec",
        )
    )
    registry.register_command(
        CommandInfo(
            "codec",
            "encode audio to codes and decode it back with a built audio-codec package",
            "Run the audio-codec package in OUTPUT_DIR on each AUDIO file with ONNX Runtime:\n"
            "encode it to codes, decode them, and write the decoded audio.",
            PACKAGE,
            inputs_metavar="AUDIO",
            inputs_help="the audio files (WAV, FLAC, OGG, MP3)",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "audio-codec",
            accepts="mobius_audio.codec_runner:is_codec_package",
            run="mobius_audio.codec_runner:run_cli",
            package=PACKAGE,
            help=CODEC_HELP,
            examples=(
                "mobius codec dac-out/ speech.wav --output speech.dac.wav --codes speech.npy",
                "mobius codec dac-out/ speech.wav --codebooks 4",
                "mobius codec encodec-out/ music.flac --bandwidth 6",
            ),
            command="codec",
        )
    )
    for dest, flags, kwargs in CODEC_OPTIONS:
        registry.register_option(CliOption("codec", dest, flags, kwargs, package=PACKAGE))


TTS_HELP = (
    "A text-to-audio package (VITS / MMS-TTS: text_encoder/ and vocoder/ graphs) speaks\n"
    "PROMPT and writes a WAV file (--output, default speech.wav) at the config's sample\n"
    "rate. The package's VITS tokenizer spells the text; the duration and prior noise\n"
    "are drawn with numpy from --seed, so a seed gives the same audio (mobius-audio)."
)


def register_text_to_audio(registry) -> None:
    """The ``text-to-audio`` task (:mod:`mobius_audio.tasks_tts`) and its ``mobius generate`` runner."""
    registry.register_task(
        TaskInfo(
            "text-to-audio",
            "mobius_audio.tasks_tts:TextToAudioTask",
            PACKAGE,
            validate="mobius_audio.validate_tts:validate_text_to_audio",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "text-to-audio",
            accepts="mobius_audio.tts:is_text_to_audio_package",
            run="mobius_audio.tts:run_cli",
            package=PACKAGE,
            help=TTS_HELP,
            examples=('mobius generate mms-tts-out/ "Hello there" --output hello.wav --seed 0',),
        )
    )
    registry.register_option(
        CliOption(
            "generate",
            "speaker",
            ("--speaker",),
            dict(
                type=int,
                default=None,
                metavar="ID",
                help="the voice of a multi-speaker text-to-audio package (0 to num_speakers - 1, "
                "default 0)",
            ),
            group="text-to-audio packages (VITS / MMS-TTS)",
            package=PACKAGE,
        )
    )


FRAME_CLASSIFIER_HELP = (
    "An audio encoder built from a *ForAudioFrameClassification checkpoint (speaker\n"
    "diarization) prints the segments of each audio file where labels are active: a\n"
    "label is on in a frame when its sigmoid is above 0.5, and runs of frames with the\n"
    "same labels make one '[start -> end] labels' line (mobius-audio)."
)

SPEAKER_HELP = (
    "An audio encoder built from a *ForXVector checkpoint (wav2vec2, WavLM,\n"
    "UniSpeech-SAT...) gives each AUDIO file's x-vector and prints its cosine similarity\n"
    "to the first file's: the higher, the likelier the same speaker (the threshold is the\n"
    "model's to choose; transformers' example uses 0.7) (mobius-audio)."
)


def register_speaker_heads(registry) -> None:
    """``mobius classify`` of frame classifiers and ``mobius speaker`` of x-vector packages."""
    from mobius.plugins import CommandInfo

    registry.register_runner(
        RunnerInfo(
            "audio-frame-classifier",
            accepts="mobius_audio.speaker_heads:is_frame_classifier_package",
            run="mobius_audio.speaker_heads:run_classify_cli",
            package=PACKAGE,
            help=FRAME_CLASSIFIER_HELP,
            examples=("mobius classify diarization-out/ meeting.wav",),
            command="classify",
        )
    )
    registry.register_command(
        CommandInfo(
            "speaker",
            "compare the speakers of audio files with a built x-vector package",
            "Run the x-vector package in OUTPUT_DIR on each AUDIO file with ONNX Runtime and\n"
            "print the cosine similarity of each file's speaker embedding to the first's\n"
            "(decoding audio needs pip install mobius-audio[run]).",
            PACKAGE,
            inputs_metavar="AUDIO",
            inputs_help="the audio files (WAV, FLAC, OGG, MP3); the first is the reference",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "xvector",
            accepts="mobius_audio.speaker_heads:is_speaker_package",
            run="mobius_audio.speaker_heads:run_speaker_cli",
            package=PACKAGE,
            help=SPEAKER_HELP,
            examples=(
                "mobius speaker xvector-out/ alice.wav unknown.wav",
                "mobius speaker xvector-out/ a.wav b.wav c.wav --output embeddings.npy",
            ),
            command="speaker",
        )
    )
    registry.register_option(
        CliOption(
            "speaker",
            "speaker_output",
            ("--output",),
            dict(
                default=None,
                metavar="FILE.npy",
                help="also write the embeddings, float32 [files, xvector_output_dim], to FILE.npy",
            ),
            package=PACKAGE,
        )
    )
