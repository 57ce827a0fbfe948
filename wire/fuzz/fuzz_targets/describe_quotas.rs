//! DescribeQuotasRequest and DescribeQuotasResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::describe_quotas::{DescribeQuotasRequest, DescribeQuotasResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeQuotasRequest, DescribeQuotasResponse>(data, |_, _| {}, |_, _| {});
});
