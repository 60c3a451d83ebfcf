# One image for the API, the workers and the sweeper (docker-compose.yml picks the command).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webapi ./webapi
COPY worker ./worker
COPY models ./models
COPY migrations ./migrations
COPY scripts ./scripts
RUN pip install --no-cache-dir . && useradd --create-home --uid 10001 tome && mkdir -p /data && chown tome /data
USER tome
ENV TOME_DATA_DIR=/data
EXPOSE 8000
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "webapi:create_app()"]
