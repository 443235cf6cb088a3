//! Go's `encoding/gob`, as far as the DHCP daemon's RPC needs it.
//!
//! The reference plugin and daemon talk Go `net/rpc`, whose messages are
//! gob. The `gob` crate (0.1.0, 2018) is unmaintained and maps gob onto
//! serde in ways Go does not (it cannot decode by the sender's type
//! descriptions), so this is a small codec of our own, written from the
//! format's documentation:
//!
//! - a stream is a sequence of messages, each an unsigned length and then
//!   a signed type id: negative, a type definition (`wireType`) for that id
//!   follows; positive, a value of that type follows;
//! - unsigned integers under 128 are one byte, others a byte holding the
//!   negated byte count and then the big-endian bytes; a signed integer
//!   `i` travels as the unsigned `i << 1` (`!i << 1 | 1` when negative);
//! - strings and byte slices are a length and the bytes; slices and arrays
//!   a count and the elements; maps a count and key/value pairs;
//! - a struct is a list of (field-number delta, value) pairs ended by a 0
//!   delta; fields holding their zero value are left out;
//! - a top-level value that is not a struct is preceded by a 0 byte;
//! - types with a `GobEncode` or `MarshalBinary` method travel as the
//!   bytes that method makes; Go's `net.IP` and `net.IPMask` have neither
//!   and travel as plain byte slices (4 or 16 address bytes).
//!
//! Decoding follows the sender's type definitions ([`Decoder`] keeps them
//! per stream, as Go does), so fields this side does not know are read and
//! ignored, and fields matched by name. Encoding ([`Encoder`]) describes
//! each type once per stream from a static [`Type`] schema.

use std::collections::HashMap;
use std::io::{self, Read};

/// The ids Go predefines for its basic types.
const ID_BOOL: i64 = 1;
const ID_INT: i64 = 2;
const ID_UINT: i64 = 3;
const ID_FLOAT: i64 = 4;
const ID_BYTES: i64 = 5;
const ID_STRING: i64 = 6;
const ID_COMPLEX: i64 = 7;
const ID_INTERFACE: i64 = 8;
/// The ids of the types that describe types (`wireType` and its parts).
const ID_WIRE_TYPE: i64 = 16;
const ID_ARRAY_TYPE: i64 = 17;
const ID_COMMON_TYPE: i64 = 18;
const ID_SLICE_TYPE: i64 = 19;
const ID_STRUCT_TYPE: i64 = 20;
const ID_FIELD_TYPE: i64 = 21;
const ID_FIELD_TYPE_SLICE: i64 = 22;
const ID_MAP_TYPE: i64 = 23;
/// Go's `gobEncoderType`; the peer never names it by id (it only appears
/// inside `wireType`), so this side picks a free one below the user range.
const ID_ENCODER_TYPE: i64 = 24;
/// The first id a sender assigns to its own types.
const FIRST_USER_ID: i64 = 65;

/// Messages larger than this are refused (real ones are under a kilobyte).
const MAX_MESSAGE_BYTES: u64 = 1 << 20;
/// Types nest this deep at most; deeper input is refused, not recursed on.
const MAX_DEPTH: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum GobError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("gob: {0}")]
    Malformed(String),
}

fn malformed<T>(msg: impl Into<String>) -> Result<T, GobError> {
    Err(GobError::Malformed(msg.into()))
}

/// A decoded value, shaped by the sender's types.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Bytes(Vec<u8>),
    String(String),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
    /// The fields that were sent (zero-valued ones are not), by name.
    Struct(Vec<(String, Value)>),
    /// A value its type marshalled itself (`MarshalText` and friends).
    Marshaled(Vec<u8>),
    /// An interface value; its contents are skipped (nothing here uses one).
    Interface,
    Complex(f64, f64),
}

impl Value {
    /// The field `name` of a struct; `None` when absent (zero) or not a struct.
    pub fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Struct(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string or byte field as text; absent means "".
    pub fn text(&self, name: &str) -> String {
        match self.field(name) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bytes(b) | Value::Marshaled(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        }
    }

    /// Byte contents of a field (`[]byte`, marshalled or string); absent
    /// means empty.
    pub fn bytes(&self, name: &str) -> Vec<u8> {
        match self.field(name) {
            Some(Value::Bytes(b) | Value::Marshaled(b)) => b.clone(),
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            _ => Vec::new(),
        }
    }

    pub fn uint(&self, name: &str) -> u64 {
        match self.field(name) {
            Some(Value::Uint(u)) => *u,
            Some(Value::Int(i)) => u64::try_from(*i).unwrap_or(0),
            _ => 0,
        }
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.field(name) {
            Some(Value::Int(i)) => Some(*i),
            Some(Value::Uint(u)) => i64::try_from(*u).ok(),
            _ => None,
        }
    }

    /// The elements of a slice field; absent means none.
    pub fn list(&self, name: &str) -> &[Value] {
        match self.field(name) {
            Some(Value::List(items)) => items,
            _ => &[],
        }
    }
}

/// What this side sends: a static description of a Go type.
#[derive(Debug, Clone, Copy)]
pub enum Type {
    Int,
    Uint,
    String,
    Bytes,
    Slice(&'static SliceType),
    Struct(&'static StructType),
}

#[derive(Debug)]
pub struct SliceType {
    pub name: &'static str,
    pub elem: Type,
}

#[derive(Debug)]
pub struct StructType {
    pub name: &'static str,
    pub fields: &'static [(&'static str, Type)],
}

impl Type {
    /// The name a defined type is remembered by on a stream.
    fn defined_name(self) -> Option<&'static str> {
        match self {
            Type::Slice(s) => Some(s.name),
            Type::Struct(s) => Some(s.name),
            Type::Int | Type::Uint | Type::String | Type::Bytes => None,
        }
    }
}

// ---- primitive encoding ----

fn put_uint(out: &mut Vec<u8>, value: u64) {
    if value < 128 {
        out.push(value as u8);
        return;
    }
    let bytes = value.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    let count = bytes.len() - skip;
    // The count travels negated in one byte.
    out.push((count as u8).wrapping_neg());
    out.extend_from_slice(&bytes[skip..]);
}

fn put_int(out: &mut Vec<u8>, value: i64) {
    let folded = if value < 0 {
        (!(value as u64)) << 1 | 1
    } else {
        (value as u64) << 1
    };
    put_uint(out, folded);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_uint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads primitives from one message's bytes.
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, GobError> {
        let (&first, rest) = match self.data.split_first() {
            Some(split) => split,
            None => return malformed("message ends early"),
        };
        self.data = rest;
        Ok(first)
    }

    fn take(&mut self, count: u64) -> Result<&'a [u8], GobError> {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if count > self.data.len() {
            return malformed("length beyond the message");
        }
        let (head, rest) = self.data.split_at(count);
        self.data = rest;
        Ok(head)
    }

    fn uint(&mut self) -> Result<u64, GobError> {
        let first = self.byte()?;
        if first < 128 {
            return Ok(u64::from(first));
        }
        let count = first.wrapping_neg();
        if count > 8 {
            return malformed("integer longer than 8 bytes");
        }
        let mut value = 0u64;
        for &b in self.take(u64::from(count))? {
            value = value << 8 | u64::from(b);
        }
        Ok(value)
    }

    fn int(&mut self) -> Result<i64, GobError> {
        let folded = self.uint()?;
        Ok(if folded & 1 == 1 {
            !(folded >> 1) as i64
        } else {
            (folded >> 1) as i64
        })
    }

    fn bytes(&mut self) -> Result<Vec<u8>, GobError> {
        let count = self.uint()?;
        Ok(self.take(count)?.to_vec())
    }

    /// A count of elements; each takes at least one byte, so a count larger
    /// than what is left is malformed (and not a reason to allocate).
    fn count(&mut self) -> Result<usize, GobError> {
        let count = self.uint()?;
        if count > self.data.len() as u64 {
            return malformed("element count beyond the message");
        }
        Ok(count as usize)
    }
}

// ---- decoding ----

/// A type as the sender defined it.
#[derive(Debug, Clone)]
enum WireType {
    Struct { fields: Vec<(String, i64)> },
    Slice { elem: i64 },
    Array { elem: i64 },
    Map { key: i64, elem: i64 },
    Marshaled,
}

/// Reads gob values from one stream, remembering the sender's types.
pub struct Decoder<R> {
    reader: R,
    types: HashMap<i64, WireType>,
}

impl<R: Read> Decoder<R> {
    pub fn new(reader: R) -> Decoder<R> {
        let common = ("CommonType".to_string(), ID_COMMON_TYPE);
        let field = |name: &str, id| (name.to_string(), id);
        let mut types = HashMap::new();
        types.insert(
            ID_COMMON_TYPE,
            WireType::Struct {
                fields: vec![field("Name", ID_STRING), field("Id", ID_INT)],
            },
        );
        types.insert(
            ID_ARRAY_TYPE,
            WireType::Struct {
                fields: vec![common.clone(), field("Elem", ID_INT), field("Len", ID_INT)],
            },
        );
        types.insert(
            ID_SLICE_TYPE,
            WireType::Struct {
                fields: vec![common.clone(), field("Elem", ID_INT)],
            },
        );
        types.insert(
            ID_FIELD_TYPE,
            WireType::Struct {
                fields: vec![field("Name", ID_STRING), field("Id", ID_INT)],
            },
        );
        types.insert(
            ID_FIELD_TYPE_SLICE,
            WireType::Slice {
                elem: ID_FIELD_TYPE,
            },
        );
        types.insert(
            ID_STRUCT_TYPE,
            WireType::Struct {
                fields: vec![common.clone(), field("Field", ID_FIELD_TYPE_SLICE)],
            },
        );
        types.insert(
            ID_MAP_TYPE,
            WireType::Struct {
                fields: vec![common.clone(), field("Key", ID_INT), field("Elem", ID_INT)],
            },
        );
        types.insert(
            ID_ENCODER_TYPE,
            WireType::Struct {
                fields: vec![common],
            },
        );
        types.insert(
            ID_WIRE_TYPE,
            WireType::Struct {
                fields: vec![
                    field("ArrayT", ID_ARRAY_TYPE),
                    field("SliceT", ID_SLICE_TYPE),
                    field("StructT", ID_STRUCT_TYPE),
                    field("MapT", ID_MAP_TYPE),
                    field("GobEncoderT", ID_ENCODER_TYPE),
                    field("BinaryMarshalerT", ID_ENCODER_TYPE),
                    field("TextMarshalerT", ID_ENCODER_TYPE),
                ],
            },
        );
        Decoder { reader, types }
    }

    /// The next value on the stream, after any type definitions before it.
    /// `Ok(None)` at a clean end of stream (before a message starts).
    pub fn next_value(&mut self) -> Result<Option<Value>, GobError> {
        loop {
            let Some(message) = self.read_message()? else {
                return Ok(None);
            };
            let mut reader = Reader { data: &message };
            let id = reader.int()?;
            if id < 0 {
                let Some(defined) = id.checked_neg() else {
                    return malformed("type id out of range");
                };
                self.define(defined, &mut reader)?;
                continue;
            }
            let is_struct = matches!(self.types.get(&id), Some(WireType::Struct { .. }));
            if !is_struct && reader.uint()? != 0 {
                return malformed("top-level value without its 0 field marker");
            }
            return self.value(id, &mut reader, 0).map(Some);
        }
    }

    fn read_message(&mut self) -> Result<Option<Vec<u8>>, GobError> {
        let mut first = [0u8; 1];
        loop {
            match self.reader.read(&mut first) {
                Ok(0) => return Ok(None),
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let length = if first[0] < 128 {
            u64::from(first[0])
        } else {
            let count = usize::from(first[0].wrapping_neg());
            if count > 8 {
                return malformed("message length longer than 8 bytes");
            }
            let mut bytes = [0u8; 8];
            self.reader.read_exact(&mut bytes[8 - count..])?;
            u64::from_be_bytes(bytes)
        };
        if length > MAX_MESSAGE_BYTES {
            return malformed(format!("message of {length} bytes is too large"));
        }
        let mut message = vec![0u8; length as usize];
        self.reader.read_exact(&mut message)?;
        Ok(Some(message))
    }

    fn define(&mut self, id: i64, reader: &mut Reader<'_>) -> Result<(), GobError> {
        if id < FIRST_USER_ID {
            return malformed(format!("type definition for reserved id {id}"));
        }
        let wire = self.value(ID_WIRE_TYPE, reader, 0)?;
        let elem_of = |v: &Value| v.int("Elem").unwrap_or(0);
        let definition = if let Some(s) = wire.field("StructT") {
            let fields = s
                .list("Field")
                .iter()
                .map(|f| (f.text("Name"), f.int("Id").unwrap_or(0)))
                .collect();
            WireType::Struct { fields }
        } else if let Some(s) = wire.field("SliceT") {
            WireType::Slice { elem: elem_of(s) }
        } else if let Some(a) = wire.field("ArrayT") {
            WireType::Array { elem: elem_of(a) }
        } else if let Some(m) = wire.field("MapT") {
            WireType::Map {
                key: m.int("Key").unwrap_or(0),
                elem: elem_of(m),
            }
        } else if wire.field("GobEncoderT").is_some()
            || wire.field("BinaryMarshalerT").is_some()
            || wire.field("TextMarshalerT").is_some()
        {
            WireType::Marshaled
        } else {
            return malformed(format!("empty type definition for id {id}"));
        };
        self.types.insert(id, definition);
        Ok(())
    }

    fn value(&self, id: i64, reader: &mut Reader<'_>, depth: usize) -> Result<Value, GobError> {
        if depth > MAX_DEPTH {
            return malformed("types nested too deeply");
        }
        match id {
            ID_BOOL => return Ok(Value::Bool(reader.uint()? != 0)),
            ID_INT => return Ok(Value::Int(reader.int()?)),
            ID_UINT => return Ok(Value::Uint(reader.uint()?)),
            // Floats travel byte-reversed so that small exponents are short.
            ID_FLOAT => return Ok(Value::Float(f64::from_bits(reader.uint()?.swap_bytes()))),
            ID_COMPLEX => {
                let re = f64::from_bits(reader.uint()?.swap_bytes());
                let im = f64::from_bits(reader.uint()?.swap_bytes());
                return Ok(Value::Complex(re, im));
            }
            ID_BYTES => return Ok(Value::Bytes(reader.bytes()?)),
            ID_STRING => {
                let bytes = reader.bytes()?;
                return Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            }
            ID_INTERFACE => {
                // The concrete type's name; empty is a nil interface.
                let name = reader.bytes()?;
                if !name.is_empty() {
                    let _type_id = reader.int()?;
                    let length = reader.uint()?;
                    reader.take(length)?;
                }
                return Ok(Value::Interface);
            }
            _ => {}
        }
        let Some(wire) = self.types.get(&id) else {
            return malformed(format!("value of undefined type id {id}"));
        };
        match wire {
            WireType::Struct { fields } => {
                let mut decoded = Vec::new();
                let mut number: i64 = -1;
                loop {
                    let delta = reader.uint()?;
                    if delta == 0 {
                        break;
                    }
                    number = number.saturating_add(i64::try_from(delta).unwrap_or(i64::MAX));
                    let Some((name, field_id)) =
                        usize::try_from(number).ok().and_then(|n| fields.get(n))
                    else {
                        return malformed(format!("field number {number} out of range"));
                    };
                    decoded.push((name.clone(), self.value(*field_id, reader, depth + 1)?));
                }
                Ok(Value::Struct(decoded))
            }
            WireType::Slice { elem } | WireType::Array { elem } => {
                let count = reader.count()?;
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(*elem, reader, depth + 1)?);
                }
                Ok(Value::List(items))
            }
            WireType::Map { key, elem } => {
                let count = reader.count()?;
                let mut pairs = Vec::with_capacity(count);
                for _ in 0..count {
                    let k = self.value(*key, reader, depth + 1)?;
                    let v = self.value(*elem, reader, depth + 1)?;
                    pairs.push((k, v));
                }
                Ok(Value::Map(pairs))
            }
            WireType::Marshaled => Ok(Value::Marshaled(reader.bytes()?)),
        }
    }
}

// ---- encoding ----

/// Writes gob values onto one stream, defining each type once.
#[derive(Debug, Default)]
pub struct Encoder {
    sent: HashMap<&'static str, i64>,
    next_id: i64,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            sent: HashMap::new(),
            next_id: FIRST_USER_ID,
        }
    }

    /// The messages that carry `value` of type `ty`: the definitions of the
    /// types not yet sent on this stream, then the value.
    pub fn encode(&mut self, ty: Type, value: &Value) -> Result<Vec<u8>, GobError> {
        let mut out = Vec::new();
        let id = self.define(ty, &mut out, 0)?;
        let mut payload = Vec::new();
        put_int(&mut payload, id);
        if !matches!(ty, Type::Struct(_)) {
            payload.push(0);
        }
        encode_value(ty, value, &mut payload, 0)?;
        put_uint(&mut out, payload.len() as u64);
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// The id of `ty`, appending its definition (after those of the types
    /// it uses) when this stream has not seen it.
    fn define(&mut self, ty: Type, out: &mut Vec<u8>, depth: usize) -> Result<i64, GobError> {
        if depth > MAX_DEPTH {
            return malformed("schema nested too deeply");
        }
        let name = match ty {
            Type::Int => return Ok(ID_INT),
            Type::Uint => return Ok(ID_UINT),
            Type::String => return Ok(ID_STRING),
            Type::Bytes => return Ok(ID_BYTES),
            Type::Slice(_) | Type::Struct(_) => ty.defined_name().unwrap_or(""),
        };
        if let Some(&id) = self.sent.get(name) {
            return Ok(id);
        }
        let id = self.next_id;
        self.next_id += 1;
        // Remembered before the parts so that a type using itself ends.
        self.sent.insert(name, id);
        // wireType: field 0 ArrayT, 1 SliceT, 2 StructT, 3 MapT,
        // 4 GobEncoderT, 5 BinaryMarshalerT, 6 TextMarshalerT.
        let mut wire = Vec::new();
        match ty {
            Type::Slice(slice) => {
                let elem = self.define(slice.elem, out, depth + 1)?;
                put_uint(&mut wire, 2);
                put_common(&mut wire, name, id);
                put_uint(&mut wire, 1);
                put_int(&mut wire, elem);
                put_uint(&mut wire, 0);
            }
            Type::Struct(st) => {
                let mut field_ids = Vec::with_capacity(st.fields.len());
                for (_, field_type) in st.fields {
                    field_ids.push(self.define(*field_type, out, depth + 1)?);
                }
                put_uint(&mut wire, 3);
                put_common(&mut wire, name, id);
                if !st.fields.is_empty() {
                    put_uint(&mut wire, 1);
                    put_uint(&mut wire, st.fields.len() as u64);
                    for ((field_name, _), field_id) in st.fields.iter().zip(field_ids) {
                        put_uint(&mut wire, 1);
                        put_bytes(&mut wire, field_name.as_bytes());
                        put_uint(&mut wire, 1);
                        put_int(&mut wire, field_id);
                        put_uint(&mut wire, 0);
                    }
                }
                put_uint(&mut wire, 0);
            }
            Type::Int | Type::Uint | Type::String | Type::Bytes => {}
        }
        put_uint(&mut wire, 0);
        let mut payload = Vec::new();
        put_int(&mut payload, -id);
        payload.extend_from_slice(&wire);
        put_uint(out, payload.len() as u64);
        out.extend_from_slice(&payload);
        Ok(id)
    }
}

/// `CommonType{Name, Id}` as field 0 of a type description.
fn put_common(out: &mut Vec<u8>, name: &str, id: i64) {
    put_uint(out, 1);
    put_uint(out, 1);
    put_bytes(out, name.as_bytes());
    put_uint(out, 1);
    put_int(out, id);
    put_uint(out, 0);
}

fn mismatch<T>(ty: Type, value: &Value) -> Result<T, GobError> {
    malformed(format!("cannot encode {value:?} as {ty:?}"))
}

/// Whether Go leaves a struct field holding `value` out.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Float(f) => *f == 0.0,
        Value::Bytes(b) | Value::Marshaled(b) => b.is_empty(),
        Value::String(s) => s.is_empty(),
        Value::List(items) => items.is_empty(),
        Value::Map(pairs) => pairs.is_empty(),
        // Nested structs are always sent.
        Value::Struct(_) => false,
        Value::Interface => true,
        Value::Complex(re, im) => *re == 0.0 && *im == 0.0,
    }
}

fn encode_value(ty: Type, value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), GobError> {
    if depth > MAX_DEPTH {
        return malformed("value nested too deeply");
    }
    match (ty, value) {
        (Type::Int, Value::Int(i)) => put_int(out, *i),
        (Type::Uint, Value::Uint(u)) => put_uint(out, *u),
        (Type::String, Value::String(s)) => put_bytes(out, s.as_bytes()),
        (Type::Bytes, Value::Bytes(b) | Value::Marshaled(b)) => put_bytes(out, b),
        (Type::Slice(slice), Value::List(items)) => {
            put_uint(out, items.len() as u64);
            for item in items {
                encode_value(slice.elem, item, out, depth + 1)?;
            }
        }
        (Type::Struct(st), Value::Struct(fields)) => {
            let mut last: i64 = -1;
            for (number, (name, field_type)) in st.fields.iter().enumerate() {
                let Some((_, field_value)) = fields.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                if is_zero(field_value) {
                    continue;
                }
                put_uint(out, (number as i64 - last) as u64);
                last = number as i64;
                encode_value(*field_type, field_value, out, depth + 1)?;
            }
            put_uint(out, 0);
        }
        _ => return mismatch(ty, value),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    static POINT: StructType = StructType {
        name: "Point",
        fields: &[
            ("X", Type::Int),
            ("Y", Type::Int),
            ("Tags", Type::Slice(&STRINGS)),
            ("Addr", Type::Bytes),
        ],
    };
    static STRINGS: SliceType = SliceType {
        name: "[]string",
        elem: Type::String,
    };

    #[test]
    fn integers_as_go_writes_them() {
        let mut out = Vec::new();
        put_uint(&mut out, 7);
        put_uint(&mut out, 256);
        put_int(&mut out, -1);
        put_int(&mut out, 1);
        put_int(&mut out, -129);
        // 256 = FE 01 00; -1 = 01; 1 = 02; -129 = ^-129<<1|1 = 257 = FE 01 01.
        assert_eq!(out, [7, 0xFE, 1, 0, 1, 2, 0xFE, 1, 1]);
        let mut reader = Reader { data: &out };
        assert_eq!(reader.uint().unwrap(), 7);
        assert_eq!(reader.uint().unwrap(), 256);
        assert_eq!(reader.int().unwrap(), -1);
        assert_eq!(reader.int().unwrap(), 1);
        assert_eq!(reader.int().unwrap(), -129);
    }

    /// What Go's encoder wrote for two values of
    /// `struct{A int; B string; IP net.IP; N net.IPNet; L []string}`:
    /// `{7, "hi", ParseIP("192.168.1.5"), 10.1.0.0/16, ["x"]}` and `{A: -2}`.
    const GO_STREAM: &[u8] = &[
        0x30, 0xff, 0x81, 0x3, 0x1, 0x1, 0x1, 0x54, 0x1, 0xff, 0x82, 0x0, 0x1, 0x5, 0x1, 0x1, 0x41,
        0x1, 0x4, 0x0, 0x1, 0x1, 0x42, 0x1, 0xc, 0x0, 0x1, 0x2, 0x49, 0x50, 0x1, 0xa, 0x0, 0x1,
        0x1, 0x4e, 0x1, 0xff, 0x84, 0x0, 0x1, 0x1, 0x4c, 0x1, 0xff, 0x86, 0x0, 0x0, 0x0, 0x23,
        0xff, 0x83, 0x3, 0x1, 0x1, 0x5, 0x49, 0x50, 0x4e, 0x65, 0x74, 0x1, 0xff, 0x84, 0x0, 0x1,
        0x2, 0x1, 0x2, 0x49, 0x50, 0x1, 0xa, 0x0, 0x1, 0x4, 0x4d, 0x61, 0x73, 0x6b, 0x1, 0xa, 0x0,
        0x0, 0x0, 0x16, 0xff, 0x85, 0x2, 0x1, 0x1, 0x8, 0x5b, 0x5d, 0x73, 0x74, 0x72, 0x69, 0x6e,
        0x67, 0x1, 0xff, 0x86, 0x0, 0x1, 0xc, 0x0, 0x0, 0x2d, 0xff, 0x82, 0x1, 0xe, 0x1, 0x2, 0x68,
        0x69, 0x1, 0x10, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0xff, 0xff, 0xc0, 0xa8,
        0x1, 0x5, 0x1, 0x1, 0x4, 0xa, 0x1, 0x0, 0x0, 0x1, 0x4, 0xff, 0xff, 0x0, 0x0, 0x0, 0x1, 0x1,
        0x1, 0x78, 0x0, 0x7, 0xff, 0x82, 0x1, 0x3, 0x3, 0x0, 0x0,
    ];

    #[test]
    fn decodes_what_go_wrote() {
        let mut decoder = Decoder::new(GO_STREAM);
        let first = decoder.next_value().unwrap().unwrap();
        assert_eq!(first.int("A"), Some(7));
        assert_eq!(first.text("B"), "hi");
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[192, 168, 1, 5]);
        assert_eq!(first.bytes("IP"), mapped);
        let network = first.field("N").unwrap();
        assert_eq!(network.bytes("IP"), [10, 1, 0, 0]);
        assert_eq!(network.bytes("Mask"), [255, 255, 0, 0]);
        assert_eq!(first.list("L"), [Value::String("x".into())]);
        // The second value reuses the definitions; its zero fields are absent
        // except the nested struct, which Go always sends.
        let second = decoder.next_value().unwrap().unwrap();
        assert_eq!(second.int("A"), Some(-2));
        assert_eq!(second.field("B"), None);
        assert!(decoder.next_value().unwrap().is_none());
    }

    /// Every byte of a real stream replaced by several values: decoding
    /// ends in values or errors, never a panic or a hang.
    #[test]
    fn mangled_go_stream_never_panics() {
        for at in 0..GO_STREAM.len() {
            for value in [0u8, 1, 0x7f, 0x80, 0xf8, 0xfe, 0xff] {
                let mut mangled = GO_STREAM.to_vec();
                mangled[at] = value;
                let mut decoder = Decoder::new(&mangled[..]);
                for _ in 0..4 {
                    match decoder.next_value() {
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
    }

    #[test]
    fn round_trip_and_types_sent_once() {
        let value = Value::Struct(vec![
            ("X".into(), Value::Int(-3)),
            ("Y".into(), Value::Int(0)),
            (
                "Tags".into(),
                Value::List(vec![Value::String("a".into()), Value::String("b".into())]),
            ),
            ("Addr".into(), Value::Bytes(b"10.0.0.1".to_vec())),
        ]);
        let mut encoder = Encoder::new();
        let first = encoder.encode(Type::Struct(&POINT), &value).unwrap();
        let second = encoder.encode(Type::Struct(&POINT), &value).unwrap();
        assert!(second.len() < first.len(), "definitions are sent once");
        let mut stream = first.clone();
        stream.extend_from_slice(&second);
        let mut decoder = Decoder::new(&stream[..]);
        for _ in 0..2 {
            let decoded = decoder.next_value().unwrap().unwrap();
            assert_eq!(decoded.int("X"), Some(-3));
            assert_eq!(decoded.field("Y"), None, "zero fields are left out");
            assert_eq!(decoded.list("Tags").len(), 2);
            assert_eq!(decoded.text("Addr"), "10.0.0.1");
        }
    }

    #[test]
    fn top_level_non_struct_has_marker() {
        let mut encoder = Encoder::new();
        let bytes = encoder
            .encode(Type::String, &Value::String("x".into()))
            .unwrap();
        assert_eq!(bytes, [4, 0x0c, 0, 1, b'x']);
        let mut decoder = Decoder::new(&bytes[..]);
        assert_eq!(
            decoder.next_value().unwrap(),
            Some(Value::String("x".into()))
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let cases: Vec<Vec<u8>> = vec![
            vec![3, 0x82, 0x05, 0xFF],
            vec![0xF0, 1],
            vec![2, 0xFF, 0x82],
            vec![5, 0x81, 0xFF, 0xFF, 0xFF, 0xFF],
            vec![4, 0x0c, 0, 0x7F, b'x'],
            vec![1],
            // The type id i64::MIN, which has no positive counterpart.
            vec![9, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ];
        for case in cases {
            let mut decoder = Decoder::new(&case[..]);
            assert!(decoder.next_value().is_err(), "{case:?}");
        }
    }
}
