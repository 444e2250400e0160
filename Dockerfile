# syntax=docker/dockerfile:1
# Multi-stage build: a static binary (CGO off, time zone database embedded via
# the time/tzdata import in main.go) on a small base that still has /bin/sh,
# because exec actions in config commonly name a shell. Runs as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/cronswap/cronswap/internal/buildinfo.Version=${VERSION}" \
      -o /out/cronswap .

FROM alpine:3.20
RUN adduser -D -H -u 10001 cronswap
COPY --from=build /out/cronswap /usr/local/bin/cronswap
COPY config.yaml /etc/cronswap/config.yaml
USER 10001:10001
ENV CRONSWAP_CONFIG=/etc/cronswap/config.yaml
EXPOSE 9090
# Inside a container the status listener must not bind loopback only.
ENTRYPOINT ["/usr/local/bin/cronswap"]
CMD ["run", "--http-listen", "0.0.0.0:9090"]
