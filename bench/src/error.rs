//! The benchmark tool's error type: engine errors and plain messages.

/// A benchmark failure.
#[derive(Debug)]
pub enum Error {
    /// The engine failed.
    Engine(lsm::Error),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Engine(e) => write!(f, "{e}"),
            Error::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}

impl From<lsm::Error> for Error {
    fn from(e: lsm::Error) -> Self {
        Error::Engine(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Engine(e.into())
    }
}

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error::Other(s)
    }
}

/// Result of the benchmark tool.
pub type Result<T> = std::result::Result<T, Error>;
