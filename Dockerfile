# The controller image: a static-enough release build on a distroless, non-root runtime with no shell.
# Build:   docker build -t local-registry-publisher:0.1.0 .
# Expected size: about 32 MB (distroless/cc-debian12 ~24 MB + the stripped, size-optimised binary, about 10 MB,
# glibc-linked). The licenses label is the program's and those of the C libraries it links (glibc, libgcc); the
# base's other packages are recorded in its own /var/lib/dpkg/status.d, as `make image` records the libraries'.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin local-registry-publisher

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/local-registry-publisher /usr/local/bin/local-registry-publisher
# `make image` builds the same image without a Docker engine; tests/image.rs checks that the two agree.
LABEL org.opencontainers.image.title="local-registry-publisher" \
      org.opencontainers.image.description="Keeps kube-public/local-registry-hosting (KEP-1755) true to the registry running in the cluster" \
      org.opencontainers.image.licenses="Apache-2.0 AND LGPL-2.1-or-later AND GPL-3.0-or-later WITH GCC-exception-3.1" \
      org.opencontainers.image.version="0.1.0"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/local-registry-publisher"]
