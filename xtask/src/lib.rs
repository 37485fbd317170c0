//! The project's release tooling: the controller's OCI image, written without a Docker engine, with the Debian
//! packages its C libraries come from recorded for scanners and the SBOM ([`image`]); and the chart's README,
//! generated from its values.yaml ([`values_docs`]). The tests build the image they run with this same code.

pub mod image;
pub mod values_docs;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
