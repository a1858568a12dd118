//! Parquet rows as JSON objects (the Hugging Face copies of SWE-bench are Parquet files).

use parquet::file::reader::{FileReader as _, SerializedFileReader};
use serde_json::Value;

pub(crate) fn rows(bytes: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let reader = SerializedFileReader::new(bytes::Bytes::copy_from_slice(bytes))
        .map_err(|e| format!("not a readable Parquet file: {e}"))?;
    let iter = reader.get_row_iter(None).map_err(|e| format!("reading its rows: {e}"))?;
    iter.map(|r| r.map(|r| r.to_json_value()).map_err(|e| format!("reading a row: {e}"))).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_written_by_pyarrow_read_as_instances() {
        let bytes = include_bytes!("../testdata/rows.parquet");
        let got = crate::read_dataset(std::path::Path::new("rows.parquet"), bytes).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[1].instance_id.as_str(), got[1].fail_to_pass.as_slice()),
            ("o__r-2", &["t::a".to_string()][..])
        );
        assert!(crate::read_dataset(std::path::Path::new("x.parquet"), b"not parquet").is_err());
    }
}
