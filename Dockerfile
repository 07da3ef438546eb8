# One image for the bot, the workers and the stall monitor: `taubot serve http`,
# `taubot worker`, `taubot monitor` (the Helm chart sets the command per Deployment).
#
#   docker build -t registry.example.com/taubot:0.1.0 .
#
# Stage 1 builds wheels for taubot and every dependency; stage 2 installs them
# from that directory only (--no-index), so the runtime image has no compiler,
# no build tools and no network fetch at install time.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY workers ./workers
COPY shell ./shell
COPY templates ./templates
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TAUBOT_LOG_FORMAT=json
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin taubot
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels taubot \
    && rm -rf /wheels \
    && taubot --help > /dev/null
USER 10001:10001
EXPOSE 3000 9100
ENTRYPOINT ["taubot"]
CMD ["--help"]
