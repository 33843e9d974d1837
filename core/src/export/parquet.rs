//! Parquet through the `parquet` crate's column writer: each row kind's columns become nullable
//! scalars or standard three-level LISTs, buffered per column and flushed as row groups so that
//! a large export streams in bounded memory.

use std::fs::File;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::Value;

use super::rows::{Col, Row, RowKind};
use crate::error::{Error, Result};

/// Rows per row group; also flushed earlier when the buffered values pass [`MAX_VALUES`].
const GROUP_ROWS: usize = 16_384;
/// Buffered values (list elements count one each) before a row group is flushed.
const MAX_VALUES: usize = 4 << 20;

enum Values {
    Str(Vec<ByteArray>),
    Int(Vec<i64>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
}

/// The struct fields of a [`Col::Messages`] column, each its own leaf column.
pub(crate) const MESSAGE_FIELDS: [&str; 4] = ["role", "content", "tool_calls", "tool_call_id"];

struct Column {
    name: &'static str,
    col: Col,
    /// The message field this leaf holds, for [`Col::Messages`].
    field: Option<&'static str>,
    values: Values,
    def: Vec<i16>,
    rep: Vec<i16>,
}

impl Column {
    fn new(name: &'static str, col: Col, field: Option<&'static str>) -> Self {
        let values = match col {
            Col::Str | Col::Json | Col::Messages => Values::Str(Vec::new()),
            Col::Int | Col::Ints => Values::Int(Vec::new()),
            Col::Float | Col::Floats => Values::Float(Vec::new()),
            Col::Bool | Col::Bools => Values::Bool(Vec::new()),
        };
        Column {
            name,
            col,
            field,
            values,
            def: Vec::new(),
            rep: Vec::new(),
        }
    }

    fn is_list(&self) -> bool {
        matches!(
            self.col,
            Col::Ints | Col::Floats | Col::Bools | Col::Messages
        )
    }

    /// Append one value; `Ok(false)` when it is null.
    fn scalar(&mut self, v: &Value) -> std::result::Result<bool, ()> {
        let v = match self.field {
            Some(f) => v.as_object().ok_or(())?.get(f).unwrap_or(&Value::Null),
            None => v,
        };
        if v.is_null() {
            return Ok(false);
        }
        let json_text = self.col == Col::Json || (self.field.is_some() && !v.is_string());
        match (&mut self.values, self.col) {
            (Values::Str(out), _) if json_text => {
                out.push(ByteArray::from(v.to_string().into_bytes()))
            }
            (Values::Str(out), _) => out.push(ByteArray::from(v.as_str().ok_or(())?)),
            (Values::Int(out), _) => out.push(v.as_i64().ok_or(())?),
            (Values::Float(out), _) => out.push(v.as_f64().ok_or(())?),
            (Values::Bool(out), _) => out.push(v.as_bool().ok_or(())?),
        }
        Ok(true)
    }

    fn push(&mut self, v: &Value) -> Result<()> {
        let (name, col) = (self.name, self.col);
        let bad = |_| {
            Error::Protocol(format!(
                "export column `{name}` expects {}, got {}",
                col.type_name(),
                crate::contract::preview_json(v)
            ))
        };
        if !self.is_list() {
            let present = self.scalar(v).map_err(bad)?;
            self.def.push(i16::from(present));
            return Ok(());
        }
        let items = match v {
            Value::Array(a) => a.as_slice(),
            Value::Null => &[],
            _ => return Err(bad(())),
        };
        if items.is_empty() {
            self.def.push(0);
            self.rep.push(0);
        }
        for (i, item) in items.iter().enumerate() {
            let present = self.scalar(item).map_err(|_| bad(()))?;
            self.def.push(1 + i16::from(present));
            self.rep.push(i16::from(i > 0));
        }
        Ok(())
    }

    /// This leaf's part of the schema; a messages column's first leaf opens its group and its
    /// last closes it.
    fn schema(&self) -> String {
        if let Some(f) = self.field {
            let open = if f == MESSAGE_FIELDS[0] {
                format!(
                    "required group {} (LIST) {{ repeated group list {{ required group element {{ ",
                    self.name
                )
            } else {
                String::new()
            };
            let close = if f == MESSAGE_FIELDS[3] { " } } }" } else { "" };
            return format!("{open}optional binary {f} (STRING);{close}");
        }
        let physical = match self.col {
            Col::Str | Col::Json | Col::Messages => "binary",
            Col::Int | Col::Ints => "int64",
            Col::Float | Col::Floats => "double",
            Col::Bool | Col::Bools => "boolean",
        };
        let logical = if matches!(self.values, Values::Str(_)) {
            " (STRING)"
        } else {
            ""
        };
        if self.is_list() {
            format!(
                "required group {} (LIST) {{ repeated group list {{ optional {physical} element; }} }}",
                self.name
            )
        } else {
            format!("optional {physical} {}{logical};", self.name)
        }
    }
}

/// Writes rows of one kind to a Parquet file, a row group at a time.
pub struct ParquetWriter {
    writer: SerializedFileWriter<File>,
    columns: Vec<Column>,
    rows: usize,
}

fn pq(e: parquet::errors::ParquetError) -> Error {
    Error::Protocol(format!("writing Parquet: {e}"))
}

impl ParquetWriter {
    /// A writer of `kind` rows into `file`.
    pub fn new(file: File, kind: RowKind) -> Result<Self> {
        let columns: Vec<Column> = kind
            .columns()
            .iter()
            .flat_map(|&(n, c)| match c {
                Col::Messages => Vec::from(MESSAGE_FIELDS.map(|f| Column::new(n, c, Some(f)))),
                _ => vec![Column::new(n, c, None)],
            })
            .collect();
        let fields: Vec<String> = columns.iter().map(Column::schema).collect();
        let text = format!("message nenyax_{} {{ {} }}", kind.name(), fields.join(" "));
        let schema = Arc::new(parse_message_type(&text).map_err(pq)?);
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("nenyax {}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(ParquetWriter {
            writer: SerializedFileWriter::new(file, schema, Arc::new(props)).map_err(pq)?,
            columns,
            rows: 0,
        })
    }

    /// Buffer one row, flushing a row group when enough is buffered.
    pub fn write(&mut self, row: &Row) -> Result<()> {
        for c in &mut self.columns {
            c.push(row.get(c.name).unwrap_or(&Value::Null))?;
        }
        self.rows += 1;
        let buffered: usize = self.columns.iter().map(|c| c.def.len()).sum();
        if self.rows >= GROUP_ROWS || buffered >= MAX_VALUES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group().map_err(pq)?;
        for c in &mut self.columns {
            let mut w = group
                .next_column()
                .map_err(pq)?
                .ok_or_else(|| Error::Protocol("Parquet schema lost a column".into()))?;
            let rep = (!c.rep.is_empty()).then_some(c.rep.as_slice());
            let def = Some(c.def.as_slice());
            match &mut c.values {
                Values::Str(v) => w.typed::<ByteArrayType>().write_batch(v, def, rep),
                Values::Int(v) => w.typed::<Int64Type>().write_batch(v, def, rep),
                Values::Float(v) => w.typed::<DoubleType>().write_batch(v, def, rep),
                Values::Bool(v) => w.typed::<BoolType>().write_batch(v, def, rep),
            }
            .map_err(pq)?;
            w.close().map_err(pq)?;
            match &mut c.values {
                Values::Str(v) => v.clear(),
                Values::Int(v) => v.clear(),
                Values::Float(v) => v.clear(),
                Values::Bool(v) => v.clear(),
            }
            c.def.clear();
            c.rep.clear();
        }
        group.close().map_err(pq)?;
        self.rows = 0;
        Ok(())
    }

    /// Flush what is buffered and write the footer.
    pub fn finish(mut self) -> Result<()> {
        self.flush()?;
        self.writer.close().map_err(pq)?;
        Ok(())
    }
}
