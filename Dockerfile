# Strait gateway image: build with the Rust toolchain, run on distroless.
#   docker build -t strait:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin strait

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/strait /strait
USER nonroot
# 15001 HTTP CONNECT, 15008 tunnel (TCP: HTTP/2, UDP: QUIC), 15021 admin.
EXPOSE 15001/tcp 15008/tcp 15008/udp 15021/tcp
ENTRYPOINT ["/strait"]
