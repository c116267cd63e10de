# The haraqa server image: one static binary and an empty /tmp, nothing else.
#
# Build it with `make image`, which compiles the server with CGO_ENABLED=0 on
# the host into bin/image/rootfs (the build context) and then runs
# `docker build` or `podman build` on this file. Building on the host needs
# no base image and so no registry: a scratch image builds offline.
#
#   docker run -it -p 4353:4353 -v $PWD/vol1:/vol1 haraqa/haraqa /vol1
#
# The image runs as root so that this command works as written: docker
# creates a missing $PWD/vol1 owned by root, mode 0755, and only root can
# write to it. The Kubernetes manifests run the same image as a non-root
# user with fsGroup instead; docs/deploy.md says why and how.
FROM scratch

# /haraqa, and /tmp with mode 1777 (the broker makes a private directory
# there at start-up): copied as a tree so that the mode of /tmp is kept.
COPY rootfs/ /

# 4353: HTTP (REST API, /docs/, /metrics, /healthz, /readyz); 14353: binary protocol.
EXPOSE 4353 14353

ENTRYPOINT ["/haraqa"]
