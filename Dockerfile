# pitstop worker / CLI / Slack bridge image.
#   docker build -t pitstop:0.1.0 .
#   docker run --rm pitstop:0.1.0                      # python worker.py (default)
#   docker run --rm pitstop:0.1.0 pitstop --help       # any other command
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PITSTOP_HOME=/var/lib/pitstop

# openssh-client: the SSH modules (known_hosts tooling, ssh-keyscan); tini: PID 1 that
# forwards SIGTERM so the Temporal worker shuts down gracefully.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 pitstop \
    && useradd --system --uid 10001 --gid pitstop --home-dir /home/pitstop --create-home \
       --shell /usr/sbin/nologin pitstop \
    && install -d -o pitstop -g pitstop -m 0700 /var/lib/pitstop /var/lib/pitstop-payloads \
       /home/pitstop/.kube /home/pitstop/.ssh

WORKDIR /app
# .dockerignore keeps the venv, caches, tests and local secrets out of the context.
COPY . /app
RUN pip install /app

USER pitstop:pitstop
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "worker.py"]
