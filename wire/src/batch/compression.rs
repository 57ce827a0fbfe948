//! Compression of a batch's records section: none, LZ4 (frame format) or
//! Zstandard, as Kafka writes them. Decompression is bounded: the output is
//! read through a limit, so a small input that inflates past
//! `decompressed_bytes_max` is an error, never an allocation of that size.

use std::io::Read;

use super::BatchError;

/// Codec of a batch's records section (attribute bits 0–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Records stored as they are.
    #[default]
    None,
    /// LZ4 frame format: cheap to compress, fast to read.
    Lz4,
    /// Zstandard: better ratio, more CPU.
    Zstd,
}

const ATTRIBUTE_NONE: u8 = 0;
const ATTRIBUTE_GZIP: u8 = 1;
const ATTRIBUTE_SNAPPY: u8 = 2;
const ATTRIBUTE_LZ4: u8 = 3;
const ATTRIBUTE_ZSTD: u8 = 4;

/// Zstandard level for producers that ask for zstd without a level: the
/// library default trades ratio for speed well for log records.
const ZSTD_LEVEL: i32 = 3;
/// Smallest window zstd allows (1 KiB); windows are capped between this and
/// the decompression bound so a crafted frame cannot make the decoder
/// reserve a large window.
const ZSTD_WINDOW_LOG_MIN: u32 = 10;
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

impl Compression {
    /// The codec for attribute bits 0–2.
    ///
    /// # Errors
    /// [`BatchError::UnsupportedCompression`] for gzip, snappy and unknown values.
    pub fn from_attribute(bits: u8) -> Result<Compression, BatchError> {
        match bits {
            ATTRIBUTE_NONE => Ok(Compression::None),
            ATTRIBUTE_LZ4 => Ok(Compression::Lz4),
            ATTRIBUTE_ZSTD => Ok(Compression::Zstd),
            ATTRIBUTE_GZIP | ATTRIBUTE_SNAPPY => Err(BatchError::UnsupportedCompression(bits)),
            other => Err(BatchError::UnsupportedCompression(other)),
        }
    }

    /// Attribute bits 0–2 for this codec.
    #[must_use]
    pub fn attribute(self) -> u8 {
        match self {
            Compression::None => ATTRIBUTE_NONE,
            Compression::Lz4 => ATTRIBUTE_LZ4,
            Compression::Zstd => ATTRIBUTE_ZSTD,
        }
    }

    /// Compresses `plain`.
    ///
    /// # Errors
    /// [`BatchError::Compression`] if the codec fails (it does not on valid input).
    pub fn compress(self, plain: &[u8]) -> Result<Vec<u8>, BatchError> {
        match self {
            Compression::None => Ok(plain.to_vec()),
            Compression::Lz4 => {
                let mut encoder =
                    lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(plain.len() / 2));
                std::io::Write::write_all(&mut encoder, plain)
                    .map_err(|error| BatchError::Compression(error.to_string()))?;
                encoder
                    .finish()
                    .map_err(|error| BatchError::Compression(error.to_string()))
            }
            Compression::Zstd => zstd::bulk::compress(plain, ZSTD_LEVEL)
                .map_err(|error| BatchError::Compression(error.to_string())),
        }
    }

    /// Decompresses `compressed`, producing at most `decompressed_bytes_max` bytes.
    ///
    /// # Errors
    /// [`BatchError::DecompressedTooLarge`] when the output would exceed the
    /// bound; [`BatchError::Compression`] when the input is not valid for the codec.
    pub fn decompress(
        self,
        compressed: &[u8],
        decompressed_bytes_max: usize,
    ) -> Result<Vec<u8>, BatchError> {
        match self {
            Compression::None => Ok(compressed.to_vec()),
            Compression::Lz4 => read_bounded(
                lz4_flex::frame::FrameDecoder::new(compressed),
                decompressed_bytes_max,
            ),
            Compression::Zstd => {
                let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
                    .map_err(|error| BatchError::Compression(error.to_string()))?;
                decoder
                    .window_log_max(zstd_window_log_max(decompressed_bytes_max))
                    .map_err(|error| BatchError::Compression(error.to_string()))?;
                read_bounded(decoder, decompressed_bytes_max)
            }
        }
    }
}

fn zstd_window_log_max(decompressed_bytes_max: usize) -> u32 {
    let needed = usize::BITS - decompressed_bytes_max.max(1).leading_zeros();
    needed.clamp(ZSTD_WINDOW_LOG_MIN, ZSTD_WINDOW_LOG_MAX)
}

/// Reads `reader` to its end into a buffer that never grows past `max + 1`
/// bytes; one byte over the bound proves the output is too large.
fn read_bounded(reader: impl Read, max: usize) -> Result<Vec<u8>, BatchError> {
    let mut output = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(limit)
        .read_to_end(&mut output)
        .map_err(|error| BatchError::Compression(error.to_string()))?;
    if output.len() > max {
        return Err(BatchError::DecompressedTooLarge { max });
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_codec_round_trips(plain in proptest::collection::vec(any::<u8>(), 0..4096)) {
            for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
                let compressed = codec.compress(&plain).unwrap();
                prop_assert_eq!(codec.decompress(&compressed, plain.len()).unwrap(), plain.clone());
            }
        }

        #[test]
        fn garbage_input_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for codec in [Compression::Lz4, Compression::Zstd] {
                let _ = codec.decompress(&bytes, 1 << 20);
            }
        }
    }

    #[test]
    fn decompression_bomb_is_refused_for_every_codec() {
        let bomb = vec![0u8; 64 << 20];
        for codec in [Compression::Lz4, Compression::Zstd] {
            let compressed = codec.compress(&bomb).unwrap();
            assert!(compressed.len() < 1 << 20, "{codec:?} bomb should be small");
            let error = codec.decompress(&compressed, 1 << 20).unwrap_err();
            assert!(
                matches!(error, BatchError::DecompressedTooLarge { max } if max == 1 << 20),
                "{codec:?}: {error:?}"
            );
        }
    }

    #[test]
    fn gzip_and_snappy_are_refused_by_name() {
        assert!(matches!(
            Compression::from_attribute(1),
            Err(BatchError::UnsupportedCompression(1))
        ));
        assert!(Compression::from_attribute(2).is_err());
        assert!(Compression::from_attribute(7).is_err());
    }
}
