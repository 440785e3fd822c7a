"""mobius-audio's slice beyond its model types: tasks, source recognisers, CLI options, runners.

- tasks: ``speech-to-text`` and ``audio-feature-extraction`` (:mod:`mobius_audio.tasks`);
- the ``mobius generate`` runner of speech-to-text packages (:mod:`mobius_audio.generate`):
  it transcribes a WAV file.

Everything is named by lazy ``"module:attribute"`` strings: registering imports nothing.
"""

from __future__ import annotations

from mobius.plugins import RunnerInfo, TaskInfo

PACKAGE = "mobius-audio"

TASKS = {
    "speech-to-text": "SpeechToTextTask",
    "audio-feature-extraction": "AudioFeatureExtractionTask",
}

RUNNER_HELP = (
    "A speech-to-text package (Whisper, Speech2Text, Moonshine: an encoder over audio)\n"
    "takes a WAV file for PROMPT: its own feature extractor makes the log-mel features\n"
    "(a WAV at another rate is resampled linearly) and the decoder starts from the\n"
    "prompt transformers' Whisper generate uses (start, language, task, no-timestamps\n"
    "tokens) (mobius-audio)."
)


def register_slice(registry) -> None:
    """Register what mobius-audio owns besides its model types (safe to call twice)."""
    for name, task in TASKS.items():
        registry.register_task(TaskInfo(name, f"mobius_audio.tasks:{task}", PACKAGE))
    registry.register_runner(
        RunnerInfo(
            "speech-to-text",
            accepts="mobius_audio.generate:is_speech_package",
            run="mobius_audio.generate:run_cli",
            package=PACKAGE,
            help=RUNNER_HELP,
            examples=("mobius generate whisper-out/ speech.wav",),
        )
    )
