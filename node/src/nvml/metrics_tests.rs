use super::*;

fn fv(value_type: u32, value: u64) -> mf::FieldValue {
    mf::FieldValue {
        value_type,
        value,
        ..Default::default()
    }
}

#[test]
fn field_values_decode_by_nvml_value_type() {
    assert_eq!(
        decode_field(&fv(0, 2.5f64.to_bits())),
        Ok(FieldSample::F64(2.5))
    );
    assert_eq!(decode_field(&fv(1, 7)), Ok(FieldSample::U64(7)));
    assert_eq!(decode_field(&fv(3, 1 << 40)), Ok(FieldSample::U64(1 << 40)));
    assert_eq!(
        decode_field(&fv(4, u64::from_ne_bytes((-3i64).to_ne_bytes()))),
        Ok(FieldSample::I64(-3))
    );
    let mut failed = fv(1, 7);
    failed.nvml_return = ffi::ERROR_NOT_SUPPORTED;
    assert_eq!(decode_field(&failed), Err(ffi::ERROR_NOT_SUPPORTED));
}
