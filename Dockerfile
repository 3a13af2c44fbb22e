# Canon's single binary in a small image. Build: docker build -t canon .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/canon-sync/canon/cli.version=${VERSION}" -o /out/canon ./cmd/canon \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/canon /usr/local/bin/canon
# The data dir belongs to the image's non-root user, so volumes mounted
# there start writable.
COPY --from=build --chown=nonroot:nonroot /out/data /var/lib/canon
# HTTP: health, readiness, metrics (and the APIs of the roles that serve them).
EXPOSE 8080
VOLUME ["/var/lib/canon"]
WORKDIR /var/lib/canon
ENTRYPOINT ["/usr/local/bin/canon"]
CMD ["serve", "--http", "0.0.0.0:8080", "--data", "/var/lib/canon"]
