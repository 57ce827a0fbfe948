//! Record-batch decoders: arbitrary bytes as a sequence of batches, as in a
//! segment file or a fetch response.
//!
//! Input: a control byte, then the bytes. Control bit 0 set: the CRC of the
//! first batch is fixed up before decoding, so that the fuzzer gets past the
//! checksum into header and record parsing (otherwise nearly every input
//! stops at `CrcMismatch`).
//!
//! Invariants: no panic; a batch the iterator accepts also passes
//! `validate`; a batch that passes `validate_records` (what the broker
//! checks before storing) decodes with `decode_records`, and to at most
//! `record_count` records.

#![no_main]

use bytes::Bytes;
use corelog_wire::batch::{
    BatchLimits, HEADER_BYTES, LOG_OVERHEAD_BYTES, batches, compute_crc, decode_records, validate,
    validate_records,
};
use libfuzzer_sys::fuzz_target;

/// Where the CRC field sits in a RecordBatch v2 header.
const CRC_AT: usize = 17;

/// Small limits so that the fuzzer reaches them.
const LIMITS: BatchLimits = BatchLimits {
    batch_bytes_max: 64 * 1024,
    decompressed_bytes_max: 256 * 1024,
};

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let mut bytes = input.to_vec();
    if control & 1 == 1 && bytes.len() >= HEADER_BYTES {
        let batch_length = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        let end = LOG_OVERHEAD_BYTES
            .saturating_add(batch_length)
            .min(bytes.len());
        if end >= HEADER_BYTES {
            let crc = compute_crc(&bytes[..end]);
            bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        }
    }

    let _ = validate(&bytes, &LIMITS);
    for batch in batches(&bytes, &LIMITS) {
        let Ok(batch) = batch else {
            break;
        };
        let header =
            validate(batch.bytes, &LIMITS).expect("a batch the iterator accepts validates");
        let records_valid = validate_records(batch.bytes, &header, &LIMITS).is_ok();
        let decoded = decode_records(&Bytes::copy_from_slice(batch.bytes), &LIMITS);
        if records_valid {
            let records = decoded.expect("a batch that passes validate_records decodes");
            assert!(records.len() <= header.record_count as usize);
        }
    }
});
