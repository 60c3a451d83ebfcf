# One image for the API, the workers and the sweeper (docker-compose.yml picks the command).
# `--build-arg EXTRAS=qwen3` builds the GPU worker's image: the `qwen3` extra (torch, transformers, ...) and then
# qwen-tts without its declared dependencies (they pull gradio and an unpinned torch), exactly as the Makefile
# installs them. Without EXTRAS the image is the small CPU one: the API, the CPU workers and the sweeper only
# read the Qwen3 checkpoint's config files and hash its bytes, which needs no torch.
FROM python:3.11-slim
ARG EXTRAS=""
ARG QWEN_TTS_VERSION=0.1.1
# `EXTRAS=fish` (or `qwen3,fish`): the Fish Speech engine, its three packages without their declared
# dependencies (they pin numpy<=1.26.4, pydantic==2.9.2, PyAudio...), as the Makefile installs them.
ARG FISH_SPEECH_PACKAGES="fish-speech==0.1.0 descript-audio-codec==1.0.0 descript-audiotools==0.7.2"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webapi ./webapi
COPY worker ./worker
COPY models ./models
COPY migrations ./migrations
COPY scripts ./scripts
COPY tome_cli ./tome_cli
RUN pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
    && case ",${EXTRAS}," in *,qwen3,*) pip install --no-cache-dir --no-deps "qwen-tts==${QWEN_TTS_VERSION}";; esac \
    && case ",${EXTRAS}," in *,fish,*) pip install --no-cache-dir --no-deps ${FISH_SPEECH_PACKAGES};; esac \
    && useradd --create-home --uid 10001 tome && mkdir -p /data && chown tome /data
USER tome
ENV TOME_DATA_DIR=/data
EXPOSE 8000
# The API as docker-compose.yml runs it (the server options of `make run`: worker/processes.py api_command).
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "--worker-class", "webapi.gunicorn_worker.JsonErrorWorker", "--worker-connections", "500", "--keep-alive", "5", "--timeout", "120", "--limit-request-line", "4094", "--limit-request-fields", "50", "--limit-request-field_size", "8190", "--access-logfile", "-", "webapi:create_app()"]
