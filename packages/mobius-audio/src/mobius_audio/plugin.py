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
            "SeamlessM4T: the language to translate into (fra, eng, ...), required. "
            "Voxtral: transcribe the audio file given as PROMPT in this language (en, fr, ...)",
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
    # Before speech-to-text's and text-to-text's runners, which would take its first two graphs.
    register_seamless_speech(registry)
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
            options=("language", "speech_task", "timestamps"),
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
            options=(),
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
    register_bark(registry)
    register_text_to_music(registry)
    register_dia(registry)
    register_transducer(registry)
    register_speecht5_tts(registry)
    register_streaming_stt(registry)
    register_audio_language(registry)
    register_seamless_text(registry)
    register_csm(registry)


CODEC_HELP = (
    "An audio-codec package (DAC, EnCodec, Mimi, X-Codec) encodes each audio file (WAV,\n"
    "FLAC, OGG, MP3; channels averaged, resampled to the codec's rate) to discrete codes,\n"
    "one per quantizer stage and frame, and decodes them back, as transformers' DacModel,\n"
    "EncodecModel, MimiModel and XcodecModel encode and decode do. Writes the decoded audio as a 32-bit\n"
    "float WAV and prints the codes' shape; --codes also saves them (int64 [codebooks,\n"
    "frames], .npy). By default every stage is kept (the highest bitrate); --codebooks K\n"
    "keeps the first K, and an EnCodec's or X-Codec's --bandwidth (kbps, one of its\n"
    "target_bandwidths) the stages of that bitrate (mobius-audio)."
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
            help="EnCodec, X-Codec: keep the stages of this bitrate, one of config.json's "
            "target_bandwidths",
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
                "mobius codec xcodec-out/ speech.wav --bandwidth 2",
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
            options=("speaker",),
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
                "default 0); SeamlessM4T speech output: the vocoder's speaker",
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


DIA_HELP = (
    "A text-to-dialogue package (Dia: encoder/ and decoder/ graphs over DAC codes) speaks\n"
    "PROMPT, a script with speaker tags ('[S1] Hello. [S2] Hi!'), and writes a WAV file\n"
    "(--output, default dialogue.wav). The audio codec is a DAC package built apart\n"
    "(mobius build --model descript/dac_44khz dac/), given with --codec. Sampling follows\n"
    "the package's generation_config.json (temperature, top-k, top-p, classifier-free\n"
    "guidance), seeded by --seed; --temperature 0 decodes greedily, --guidance-scale 1\n"
    "turns guidance off. --max-new-tokens counts codec frames (DAC 44 kHz: 86 a second)\n"
    "(mobius-audio)."
)


def register_dia(registry) -> None:
    """The ``text-to-dialogue`` task (:mod:`mobius_audio.tasks_dia`) and its ``mobius generate`` runner."""
    registry.register_task(
        TaskInfo(
            "text-to-dialogue",
            "mobius_audio.tasks_dia:TextToDialogueTask",
            PACKAGE,
            validate="mobius_audio.validate_dia:validate_text_to_dialogue",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "text-to-dialogue",
            accepts="mobius_audio.dia_generate:is_dia_package",
            run="mobius_audio.dia_generate:run_cli",
            package=PACKAGE,
            help=DIA_HELP,
            examples=(
                'mobius generate dia-out/ "[S1] Hello there. [S2] Hi!" --codec dac-out/ '
                "--max-new-tokens 1024 --seed 0 --output hello.wav",
            ),
            options=("dia_codec", "guidance_scale"),
        )
    )
    group = "text-to-dialogue packages (Dia)"
    options = (
        ("dia_codec", ("--codec",), dict(default=None, metavar="DAC_DIR",
            help="the DAC package (audio-codec) that turns Dia's codes into audio")),
    )  # fmt: skip
    for dest, flags, kwargs in options:
        registry.register_option(
            CliOption("generate", dest, flags, kwargs, group=group, package=PACKAGE)
        )


MUSIC_HELP = (
    "A text-to-music package (MusicGen, MusicGen-Melody: text_encoder/, decoder/ and\n"
    "audio_decoder/ graphs) turns PROMPT, a description of the music, into a WAV file\n"
    "(--output, default music.wav) at the codec's sample rate. The decoder writes one\n"
    "EnCodec code per codebook and step in MusicGen's delay pattern; --max-new-tokens\n"
    "counts steps (50 a second). A MusicGen-Melody package also follows the tune of\n"
    "--melody AUDIO (its chroma, in numpy). Sampling follows the package's\n"
    "generation_config.json (top-k 250), seeded by --seed; --temperature 0 decodes\n"
    "greedily. Classifier-free guidance (--guidance-scale, default the generation\n"
    "config's 3.0; 1 turns it off) mixes each step's logits with those of an empty\n"
    "prompt (mobius-audio)."
)


def register_text_to_music(registry) -> None:
    """The ``text-to-music`` task (:mod:`mobius_audio.tasks_music`) and its ``mobius generate`` runner."""
    for name, task in (
        ("text-to-music", "TextToMusicTask"),
        ("text-to-music-prefix", "TextToMusicPrefixTask"),
    ):
        registry.register_task(
            TaskInfo(
                name,
                f"mobius_audio.tasks_music:{task}",
                PACKAGE,
                validate="mobius_audio.validate_music:validate_text_to_music",
            )
        )
    registry.register_runner(
        RunnerInfo(
            "text-to-music",
            accepts="mobius_audio.music:is_music_package",
            run="mobius_audio.music:run_cli",
            package=PACKAGE,
            help=MUSIC_HELP,
            examples=(
                'mobius generate musicgen-out/ "80s pop with synth" --output pop.wav --seed 0',
                'mobius generate musicgen-out/ "calm piano" --guidance-scale 3 --max-new-tokens 500',
                'mobius generate melody-out/ "jazz trio" --melody tune.wav --output jazz.wav',
            ),
            options=("guidance_scale", "melody"),
        )
    )
    registry.register_option(
        CliOption(
            "generate",
            "melody",
            ("--melody",),
            dict(
                default=None,
                metavar="AUDIO",
                help="MusicGen-Melody: an audio file (WAV, FLAC, OGG, MP3) whose tune, as a "
                "chroma, conditions the music with the text",
            ),
            group="text-to-music packages (MusicGen)",
            package=PACKAGE,
        )
    )


BARK_HELP = (
    "A Bark package (semantic/, coarse_acoustics/, fine_acoustics/ and codec_decoder/\n"
    "graphs) speaks PROMPT and writes a WAV file (--output, default bark.wav) at the\n"
    "codec's 24 kHz, as transformers' BarkModel.generate does: text to semantic tokens,\n"
    "to the first two EnCodec codebooks in sliding windows, to the rest, to audio.\n"
    "Sampling follows the package's generation_config.json per stage, seeded by --seed;\n"
    "--temperature 0 decodes every stage greedily (argmax), --temperature T samples every\n"
    "stage at T. --voice-preset takes a Bark speaker .npz (semantic_prompt, coarse_prompt,\n"
    "fine_prompt). --max-new-tokens caps the semantic tokens, about 50 a second of\n"
    "speech (default 128; Bark's own cap is 768, the positions its model has) (mobius-audio)."
)


def register_bark(registry) -> None:
    """The ``bark-text-to-audio`` task (:mod:`mobius_audio.tasks_bark`) and its runner."""
    registry.register_task(
        TaskInfo("bark-text-to-audio", "mobius_audio.tasks_bark:BarkTask", PACKAGE)
    )
    registry.register_runner(
        RunnerInfo(
            "bark-text-to-audio",
            accepts="mobius_audio.bark_generate:is_bark_package",
            run="mobius_audio.bark_generate:run_cli",
            package=PACKAGE,
            help=BARK_HELP,
            examples=(
                'mobius generate bark-out/ "Hello, my dog is cute." --output hello.wav --seed 0',
                'mobius generate bark-out/ "Hello" --voice-preset en_speaker_6.npz --seed 1',
            ),
            options=("bark_voice_preset",),
        )
    )
    registry.register_option(
        CliOption(
            "generate",
            "bark_voice_preset",
            ("--voice-preset",),
            dict(
                default=None,
                metavar="NPZ",
                help="a Bark speaker prompt (.npz with semantic_prompt, coarse_prompt and "
                "fine_prompt) that sets the voice",
            ),
            group="Bark packages",
            package=PACKAGE,
        )
    )


TRANSDUCER_HELP = (
    "A transducer package (Parakeet RNN-T / TDT: encoder/, decoder/ and joint/ graphs)\n"
    "transcribes the audio file given for PROMPT (WAV, FLAC, OGG, MP3; resampled to 16 kHz)\n"
    "greedily, as transformers' ParakeetForRNNT / ParakeetForTDT generate does: the joint\n"
    "scores each encoder frame against the prediction network's state; a blank moves to the\n"
    "next frame (TDT: by the predicted duration), another token is emitted and fed back, at\n"
    "most max_symbols_per_step at one frame (RNN-T) (mobius-audio)."
)


def register_transducer(registry) -> None:
    """The ``transducer`` task (:mod:`mobius_audio.tasks_transducer`) and its ``mobius generate`` runner."""
    registry.register_task(
        TaskInfo(
            "transducer",
            "mobius_audio.tasks_transducer:TransducerTask",
            PACKAGE,
            validate="mobius_audio.transducer_validate:validate_transducer",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "transducer",
            accepts="mobius_audio.transducer:is_transducer_package",
            run="mobius_audio.transducer:run_cli",
            package=PACKAGE,
            help=TRANSDUCER_HELP,
            examples=("mobius generate parakeet-tdt-out/ speech.wav",),
            options=(),
        )
    )


SPEECHT5_TTS_HELP = (
    "A text-to-speech package (SpeechT5: encoder/, decoder/ and postnet/ graphs) speaks\n"
    "PROMPT in the voice of --speaker-embedding (an x-vector, float32 [512], .npy) and\n"
    "writes a WAV file (--output, default speech.wav). The spectrogram grows a step at a\n"
    "time until the stop probability reaches --stop-threshold, as transformers'\n"
    "generate_speech does; the always-on prenet dropout is drawn from --seed. The HiFi-GAN\n"
    "vocoder is a package of its own: built into PKG/vocoder, or given with --vocoder\n"
    "(mobius-audio)."
)

SPEECHT5_TTS_OPTIONS = (
    ("speaker_embedding", ("--speaker-embedding",), dict(default=None, metavar="NPY",
        help="SpeechT5: the voice, an x-vector saved with numpy (float32 "
        "[speaker_embedding_dim], 512 for microsoft/speecht5_tts)")),
    ("speecht5_vocoder", ("--vocoder",), dict(default=None, metavar="DIR",
        help="SpeechT5: the spectrogram-vocoder package (mobius build --model "
        "microsoft/speecht5_hifigan DIR); default PKG/vocoder")),
    ("speecht5_threshold", ("--stop-threshold",), dict(type=float, default=None, metavar="P",
        help="SpeechT5: stop when the step's stop probabilities sum to P (default 0.5)")),
    ("speecht5_minlenratio", ("--min-length-ratio",), dict(type=float, default=None,
        metavar="R", help="SpeechT5: at least R steps per input token (default 0)")),
    ("speecht5_maxlenratio", ("--max-length-ratio",), dict(type=float, default=None,
        metavar="R", help="SpeechT5: at most R steps per input token (default 20)")),
)  # fmt: skip


def register_speecht5_tts(registry) -> None:
    """SpeechT5's ``text-to-speech`` and ``spectrogram-vocoder`` tasks
    (:mod:`mobius_audio.tasks_speecht5_tts`), the hub HiFi-GAN's source recogniser and
    the ``mobius generate`` runner (:mod:`mobius_audio.speecht5_tts`)."""
    from mobius.plugins import SourceInfo

    for name, task, validate in (
        ("text-to-speech", "TextToSpeechTask", "validate_text_to_speech"),
        ("spectrogram-vocoder", "SpectrogramVocoderTask", "validate_spectrogram_vocoder"),
    ):
        registry.register_task(
            TaskInfo(
                name,
                f"mobius_audio.tasks_speecht5_tts:{task}",
                PACKAGE,
                validate=f"mobius_audio.validate_speecht5_tts:{validate}",
            )
        )
    registry.register_source(
        SourceInfo(
            "speecht5-hifigan",
            "mobius_audio.speecht5_sources:recognise",
            PACKAGE,
            help="a SpeechT5 HiFi-GAN directory whose config.json says model_type hifigan "
            "(microsoft/speecht5_hifigan), built as speecht5_hifigan",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "text-to-speech",
            accepts="mobius_audio.speecht5_tts:is_text_to_speech_package",
            run="mobius_audio.speecht5_tts:run_cli",
            package=PACKAGE,
            help=SPEECHT5_TTS_HELP,
            examples=(
                "mobius build --model microsoft/speecht5_hifigan speecht5-out/vocoder",
                'mobius generate speecht5-out/ "Hello there" --speaker-embedding voice.npy '
                "--seed 0 --output hello.wav",
            ),
            options=(
                "speaker_embedding",
                "speecht5_vocoder",
                "speecht5_threshold",
                "speecht5_minlenratio",
                "speecht5_maxlenratio",
            ),
        )
    )
    for dest, flags, kwargs in SPEECHT5_TTS_OPTIONS:
        registry.register_option(
            CliOption(
                "generate",
                dest,
                flags,
                kwargs,
                group="text-to-speech packages (SpeechT5)",
                package=PACKAGE,
            )
        )


STREAMING_STT_HELP = (
    "A streaming speech-to-text package (Kyutai STT: audio_encoder/ and decoder/ graphs)\n"
    "takes an audio file for PROMPT (WAV, FLAC, OGG, MP3; channels averaged, resampled to\n"
    "the codec's rate), codes it with Mimi's encoder and prints the text its LM reads off\n"
    "the codes, one greedy token per audio frame, as transformers' generate does\n"
    "(mobius-audio)."
)


def register_streaming_stt(registry) -> None:
    """Kyutai STT's ``streaming-speech-to-text`` task (:mod:`mobius_audio.tasks_streaming_stt`)
    and its ``mobius generate`` runner (:mod:`mobius_audio.kyutai_stt`)."""
    registry.register_task(
        TaskInfo(
            "streaming-speech-to-text",
            "mobius_audio.tasks_streaming_stt:StreamingSpeechToTextTask",
            PACKAGE,
            validate="mobius_audio.stt_stream_validate:validate_streaming_stt",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "streaming-speech-to-text",
            accepts="mobius_audio.kyutai_stt:is_streaming_stt_package",
            run="mobius_audio.kyutai_stt:run_cli",
            package=PACKAGE,
            help=STREAMING_STT_HELP,
            examples=("mobius generate kyutai-stt-out/ speech.wav",),
            options=(),
        )
    )


AUDIO_LANGUAGE_HELP = (
    "A speech-LLM package (Qwen2-Audio: audio/, embedding/ and decoder/ graphs) answers\n"
    "PROMPT about the --audio clips (WAV, FLAC, OGG, MP3; read at the feature extractor's\n"
    "rate, each at most its 30 s window). The prompt goes through the package's chat\n"
    "template with one audio item per clip (--no-chat-template: one\n"
    "<|audio_bos|><|AUDIO|><|audio_eos|> per clip in front of it), each placeholder\n"
    "expanded to the clip's audio tokens, as transformers' processor does; decoding is\n"
    "greedy unless sampling options say otherwise (mobius-audio)."
)


def register_audio_language(registry) -> None:
    """The ``audio-language`` task (:mod:`mobius_audio.tasks_audio_language`), its ``mobius
    generate`` runner (:mod:`mobius_audio.audio_language`), which reads core's ``--audio``."""

    registry.register_task(
        TaskInfo(
            "audio-language",
            "mobius_audio.tasks_audio_language:AudioLanguageTask",
            PACKAGE,
            validate="mobius_audio.validate_audio_language:validate_audio_language",
        )
    )
    register_voxtral(registry)  # before audio-language, which accepts Voxtral packages too
    register_granite_speech_adapter(registry)
    registry.register_runner(
        RunnerInfo(
            "audio-language",
            accepts="mobius_audio.audio_language:is_audio_language_package",
            run="mobius_audio.audio_language:run_cli",
            package=PACKAGE,
            help=AUDIO_LANGUAGE_HELP,
            examples=('mobius generate qwen2-audio-out/ "What is said?" --audio clip.wav',),
            options=("audios",),
        )
    )


def register_granite_speech_adapter(registry) -> None:
    """Granite Speech's LoRA adapter, merged into the text decoder at build time
    (:mod:`mobius_audio.granite_speech_source`)."""
    from mobius.plugins import SourceInfo

    registry.register_source(
        SourceInfo(
            "granite-speech-lora",
            "mobius_audio.granite_speech_source:recognise",
            PACKAGE,
            help="a Granite Speech model directory with has_lora_adapter (its PEFT LoRA "
            "adapter beside it): the adapter merged into the text decoder, which "
            "transformers turns on when audio is given",
            hub_files="mobius_audio.granite_speech_source:hub_files",
        )
    )


VOXTRAL_HELP = (
    "A Voxtral package (audio-language graphs and mistral-common's tekken.json) answers\n"
    "PROMPT about the --audio clips (WAV, FLAC, OGG, MP3; any length, cut into the\n"
    "model's 30 s chunks): one user message in mistral-common's instruct format, as\n"
    "transformers' VoxtralProcessor.apply_chat_template makes it. With --language xx (or\n"
    "--task transcribe: the model tells the language) PROMPT is an audio file to\n"
    "transcribe, as apply_transcription_request does. Decoding is greedy unless sampling\n"
    "options say otherwise (pip install mobius-audio[run]: mistral-common) (mobius-audio)."
)


def register_voxtral(registry) -> None:
    """Voxtral's build companion (:mod:`mobius_audio.voxtral_source`: ``tekken.json``) and
    its ``mobius generate`` runner (:mod:`mobius_audio.voxtral_generate`)."""
    from mobius.plugins import SourceInfo

    registry.register_source(
        SourceInfo(
            "voxtral",
            "mobius_audio.voxtral_source:recognise",
            PACKAGE,
            help="a Voxtral model directory: core's reader, and the package keeps "
            "mistral-common's tekken.json",
            hub_files="mobius_audio.voxtral_source:hub_files",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "voxtral",
            accepts="mobius_audio.voxtral_generate:is_voxtral_package",
            run="mobius_audio.voxtral_generate:run_cli",
            package=PACKAGE,
            help=VOXTRAL_HELP,
            examples=(
                'mobius generate voxtral-out/ "What is said?" --audio clip.wav',
                "mobius generate voxtral-out/ speech.wav --language en",
            ),
            options=("audios", "language", "speech_task"),
        )
    )


CSM_HELP = (
    "A conversational-speech package (CSM: backbone/, depth_decoder/ and Mimi's codec\n"
    "graphs) speaks PROMPT, one turn '[speaker]text' ('[0]' when no speaker is named),\n"
    "after the --context turns (text and audio) if any, and writes a WAV file at Mimi's\n"
    "24 kHz (--output, default speech.wav). Each frame: the backbone chooses codebook 0,\n"
    "the depth decoder the others. Sampling follows the package's generation_config.json\n"
    "(temperature, top-k; the depth decoder's depth_decoder_* settings), seeded by --seed;\n"
    "--temperature 0 decodes greedily. --max-new-tokens counts frames (12.5 a second;\n"
    "default 125) (mobius-audio)."
)


def register_csm(registry) -> None:
    """The ``conversational-speech`` task (:mod:`mobius_audio.tasks_csm`) and its ``mobius generate`` runner."""
    registry.register_task(
        TaskInfo(
            "conversational-speech",
            "mobius_audio.tasks_csm:ConversationalSpeechTask",
            PACKAGE,
            validate="mobius_audio.validate_csm:validate_conversational_speech",
        )
    )
    registry.register_runner(
        RunnerInfo(
            "conversational-speech",
            accepts="mobius_audio.csm_generate:is_csm_package",
            run="mobius_audio.csm_generate:run_cli",
            package=PACKAGE,
            help=CSM_HELP,
            examples=(
                'mobius generate csm-out/ "[0]Hello from Sesame." --seed 0 --output hi.wav',
                'mobius generate csm-out/ "[0]Fine, thanks." --context "[1]How are you?" q.wav',
            ),
            options=("csm_context",),
        )
    )
    registry.register_option(
        CliOption(
            "generate",
            "csm_context",
            ("--context",),
            dict(
                nargs=2,
                action="append",
                default=None,
                metavar=("TEXT", "AUDIO"),
                help="CSM: an earlier turn of the conversation, '[speaker]text' and its audio "
                "file; repeat for more turns, oldest first",
            ),  # fmt: skip
            group="conversational-speech packages (CSM)",
            package=PACKAGE,
        )
    )


SEAMLESS_TEXT_HELP = (
    "A SeamlessM4T text-to-text package (built with --model-type SeamlessM4TForTextToText)\n"
    "translates PROMPT into the --language given (fra, deu, ...), as transformers'\n"
    "SeamlessM4TForTextToText.generate(tgt_lang=...) does; the source language is the\n"
    "tokenizer's (eng) unless --source-language names another (mobius-audio)."
)


def register_seamless_text(registry) -> None:
    """The ``mobius generate`` runner of SeamlessM4T text-to-text packages and ``--source-language``
    (:mod:`mobius_audio.seamless_text_generate`); ``--language`` is the speech runner's."""
    registry.register_runner(
        RunnerInfo(
            "seamless-text-to-text",
            accepts="mobius_audio.seamless_text_generate:is_seamless_text_package",
            run="mobius_audio.seamless_text_generate:run_cli",
            package=PACKAGE,
            help=SEAMLESS_TEXT_HELP,
            examples=('mobius generate seamless-t2tt-out/ "Hello, how are you?" --language fra',),
            options=("language", "source_language", "speech_task", "timestamps"),
        )
    )
    registry.register_option(
        CliOption(
            "generate",
            "source_language",
            ("--source-language",),
            dict(
                default=None,
                metavar="LANG",
                help="SeamlessM4T text-to-text: the language of PROMPT (eng, deu, ...); "
                "default: the tokenizer's (eng). Example: mobius generate seamless-t2tt-out/ "
                '"Guten Morgen" --source-language deu --language fra',
            ),
            group="SeamlessM4T text-to-text packages",
            package=PACKAGE,
        )
    )


SEAMLESS_SPEECH_HELP = (
    "A SeamlessM4T speech-output package (built with --model-type SeamlessM4TForTextToSpeech\n"
    "or SeamlessM4TForSpeechToSpeech; v2: SeamlessM4Tv2ForTextToSpeech or\n"
    "SeamlessM4Tv2ForSpeechToSpeech) translates PROMPT (text; or with a speech-to-speech\n"
    "package, the audio file given as PROMPT or --audio) into the --language given, prints\n"
    "the text and speaks it into a 16 kHz WAV (--output, default translation.wav): greedy\n"
    "text, then greedy units (v2: all at once, from the text's characters), then the\n"
    "vocoder with --speaker (default 0), as transformers' generate(tgt_lang=...) does by\n"
    "default (mobius-audio)."
)


def register_seamless_speech(registry) -> None:
    """The speech-translation tasks (:mod:`mobius_audio.tasks_seamless_speech`) and their
    ``mobius generate`` runner (:mod:`mobius_audio.seamless_speech_generate`)."""
    for name, task in (
        ("text-to-speech-translation", "TextToSpeechTranslationTask"),
        ("speech-to-speech-translation", "SpeechToSpeechTranslationTask"),
        ("text-to-speech-translation-v2", "TextToSpeechTranslationV2Task"),
        ("speech-to-speech-translation-v2", "SpeechToSpeechTranslationV2Task"),
    ):
        registry.register_task(
            TaskInfo(name, f"mobius_audio.tasks_seamless_speech:{task}", PACKAGE)
        )
    registry.register_runner(
        RunnerInfo(
            "seamless-speech-output",
            accepts="mobius_audio.seamless_speech_generate:is_seamless_speech_package",
            run="mobius_audio.seamless_speech_generate:run_cli",
            package=PACKAGE,
            help=SEAMLESS_SPEECH_HELP,
            examples=(
                'mobius generate seamless-t2st/ "Hello, how are you?" --language fra '
                "--output hello.wav",
                "mobius generate seamless-s2st/ speech.wav --language fra --output out.wav",
            ),
            options=("language", "speaker", "audios"),
        )
    )
