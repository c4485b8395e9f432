# The gradiopool gateway as a container image: a Go builder, then a runtime
# FROM scratch holding only the static binary, the CA bundle (Spaces and the
# Hub are reached over HTTPS) and an empty /tmp (the front door keeps
# uploads there). Configuration comes from the environment (GRADIOPOOL_*,
# HF_TOKEN, GRADIOPOOL_ADMIN_TOKEN, ...; see `gradiopool serve -h`) or a file
# mounted at the path in GRADIOPOOL_CONFIG.
#
#   docker build -t gradiopool --build-arg VERSION=$(make -s print-version) \
#       --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run -p 8080:8080 -e GRADIOPOOL_REPLICAS=owner/app_1,owner/app_2 -e HF_TOKEN gradiopool
#
# deploy/image_test.go builds the binary exactly as the build stage does and
# runs it in an empty root holding only what the runtime stage copies.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG REVISION=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/gradiopool/gradiopool/internal/version.stamped=${VERSION} -X github.com/gradiopool/gradiopool/internal/version.stampedRevision=${REVISION}" \
      -o /out/gradiopool ./cmd/gradiopool \
 && mkdir -m 1777 /out/tmp

FROM scratch
# OCI labels: what a registry, a scanner or `docker inspect` shows of the
# build (the same version `gradiopool version` prints).
ARG VERSION=devel
ARG REVISION=
LABEL org.opencontainers.image.title="gradiopool" \
      org.opencontainers.image.description="Gateway for calling Gradio apps through warm pooled sessions" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/gradiopool/gradiopool" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tmp /tmp
COPY --from=build /out/gradiopool /gradiopool
# nonroot (65532, as in distroless); the gateway needs no privilege.
USER 65532:65532
ENV GRADIOPOOL_LISTEN=0.0.0.0:8080 \
    GRADIOPOOL_LOG_FORMAT=json
EXPOSE 8080
# SIGTERM drains: calls in flight finish (up to drain_timeout, 30 s by
# default); give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=4s --start-period=15s --retries=3 CMD ["/gradiopool", "health"]
ENTRYPOINT ["/gradiopool"]
CMD ["serve"]
