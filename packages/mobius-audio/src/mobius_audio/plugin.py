"""mobius-audio's slice beyond its model types: tasks, source recognisers, CLI options, runners.

- tasks: ``speech-to-text`` and ``audio-feature-extraction`` (:mod:`mobius_audio.tasks`);
- the ``mobius generate`` runner of speech-to-text packages (:mod:`mobius_audio.generate`):
  it transcribes an audio file (WAV, FLAC, OGG, MP3), and its options ``--timestamps``,
  ``--language`` and ``--task`` (Whisper packages);
- the runners of audio encoders with a head (:mod:`mobius_audio.encoders`): ``mobius
  generate`` transcribes with a CTC package, ``mobius classify`` runs an audio classifier.

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
    "A speech-to-text package (Whisper, Speech2Text, Moonshine: an encoder over audio)\n"
    "takes an audio file for PROMPT: WAV, FLAC, OGG or MP3, channels averaged and\n"
    "resampled to the model's rate (pip install mobius-audio[run]). Whisper decodes as\n"
    "transformers' Whisper generate does: audio longer than 30 s in consecutive\n"
    "30 s windows, each moving on to the last timestamp pair it closed (with the text\n"
    "sent to a file, a bar on stderr shows the progress); the language is detected\n"
    "once unless --language gives it; --max-new-tokens counts per window (mobius-audio)."
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
            help="the spoken language: a code (de), a name (german) or a token (<|de|>); "
            "default: the package's generation config, else detected from the first 30 s",
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
    "An audio encoder built from a *ForCTC checkpoint (wav2vec2, HuBERT, WavLM...)\n"
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


def register_slice(registry) -> None:
    """Register what mobius-audio owns besides its model types (safe to call twice)."""
    for name, task in TASKS.items():
        validate = f"mobius_audio.validate:{VALIDATORS[name]}"
        registry.register_task(
            TaskInfo(name, f"mobius_audio.tasks:{task}", PACKAGE, validate=validate)
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
            "audio-classifier",
            accepts="mobius_audio.encoders:is_audio_encoder_package",
            run="mobius_audio.encoders:run_classify_cli",
            package=PACKAGE,
            help=AUDIO_CLASSIFIER_HELP,
            examples=("mobius classify audio-classifier-out/ speech.wav birds.flac --top 3",),
            command="classify",
        )
    )
