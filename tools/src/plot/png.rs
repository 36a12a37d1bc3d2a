//! A small PNG encoder: 8-bit RGB, zlib stream of fixed-Huffman deflate blocks.
//!
//! Plots are mostly runs of one colour and rows equal to the row above, so the match finder only
//! looks back one pixel and one row (distances 3 and `stride`), which finds nearly every
//! repetition a chart has at a fraction of a general LZ77's cost.

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320) lookup table.
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[n] = c;
        n += 1;
    }
    t
};

/// CRC-32 of `data` as PNG chunks use it.
pub fn crc32(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |c, &b| {
        CRC_TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Adler-32 checksum of a zlib stream's uncompressed data.
pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before `b` may overflow.
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    /// Appends the low `len` bits of `v`, least significant first.
    fn put(&mut self, v: u32, len: u32) {
        self.acc |= (v as u64) << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Appends a Huffman code, which deflate stores most significant bit first.
    fn code(&mut self, code: u32, len: u32) {
        self.put(code.reverse_bits() >> (32 - len), len);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// Writes literal/length symbol `s` with the fixed Huffman code (RFC 1951, 3.2.6).
fn lit(b: &mut Bits, s: u32) {
    match s {
        0..=143 => b.code(0x30 + s, 8),
        144..=255 => b.code(0x190 + s - 144, 9),
        256..=279 => b.code(s - 256, 7),
        _ => b.code(0xC0 + s - 280, 8),
    }
}

fn put_match(b: &mut Bits, len: usize, dist: usize) {
    let li = LEN_BASE
        .iter()
        .rposition(|&x| x as usize <= len)
        .unwrap_or(0);
    lit(b, 257 + li as u32);
    b.put((len - LEN_BASE[li] as usize) as u32, LEN_EXTRA[li] as u32);
    let di = DIST_BASE
        .iter()
        .rposition(|&x| x as usize <= dist)
        .unwrap_or(0);
    b.code(di as u32, 5);
    b.put(
        (dist - DIST_BASE[di] as usize) as u32,
        DIST_EXTRA[di] as u32,
    );
}

/// A zlib stream of `data`: one final fixed-Huffman block, matches at the given distances.
pub fn zlib(data: &[u8], distances: &[usize]) -> Vec<u8> {
    let mut b = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // final block
    b.put(1, 2); // fixed Huffman
    let mut i = 0;
    while i < data.len() {
        let mut best = (0, 0);
        for &d in distances {
            if d == 0 || d > i || d > 32768 {
                continue;
            }
            let max = (data.len() - i).min(258);
            let len = (0..max)
                .take_while(|&k| data[i + k] == data[i + k - d])
                .count();
            if len > best.0 {
                best = (len, d);
            }
        }
        if best.0 >= 3 {
            put_match(&mut b, best.0, best.1);
            i += best.0;
        } else {
            lit(&mut b, data[i] as u32);
            i += 1;
        }
    }
    lit(&mut b, 256);
    let mut out = b.finish();
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Encodes a `width` × `height` RGB image (`rgb` row-major, 3 bytes per pixel) as PNG.
pub fn encode(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    assert_eq!(
        rgb.len(),
        width as usize * height as usize * 3,
        "image size"
    );
    let stride = width as usize * 3 + 1;
    let mut raw = Vec::with_capacity(stride * height as usize);
    for row in rgb.chunks_exact(width as usize * 3) {
        raw.push(0); // filter type None
        raw.extend_from_slice(row);
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit, truecolour, deflate, no filter, no interlace
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &zlib(&raw, &[3, stride, 1]));
    chunk(&mut png, b"IEND", &[]);
    png
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Inflates a zlib stream of stored and fixed-Huffman blocks (all this encoder writes),
    /// checking the header and the Adler-32.
    pub(crate) fn inflate(z: &[u8]) -> Result<Vec<u8>, String> {
        if z.len() < 6 || (u16::from(z[0]) << 8 | u16::from(z[1])) % 31 != 0 || z[0] & 0xf != 8 {
            return Err("bad zlib header".into());
        }
        let mut pos = 16usize; // bit position after the 2-byte header
        let bit = |pos: &mut usize| -> Result<u32, String> {
            let byte = *z.get(*pos / 8).ok_or("truncated")?;
            let b = (byte >> (*pos % 8)) & 1;
            *pos += 1;
            Ok(b as u32)
        };
        let bits = |pos: &mut usize, n: u32| -> Result<u32, String> {
            let mut v = 0;
            for k in 0..n {
                v |= bit(pos)? << k;
            }
            Ok(v)
        };
        let mut out: Vec<u8> = Vec::new();
        loop {
            let last = bits(&mut pos, 1)?;
            match bits(&mut pos, 2)? {
                0 => {
                    pos = pos.div_ceil(8) * 8;
                    let len = bits(&mut pos, 16)? as usize;
                    let nlen = bits(&mut pos, 16)? as usize;
                    if len != !nlen & 0xffff {
                        return Err("stored length check".into());
                    }
                    let at = pos / 8;
                    out.extend_from_slice(z.get(at..at + len).ok_or("truncated stored")?);
                    pos += len * 8;
                }
                1 => loop {
                    // Fixed codes: read 7 bits MSB-first, extend to 8 or 9 as the ranges say.
                    let mut c = 0;
                    for _ in 0..7 {
                        c = c << 1 | bit(&mut pos)?;
                    }
                    let sym = if c <= 0x17 {
                        c + 256
                    } else {
                        c = c << 1 | bit(&mut pos)?;
                        if (0x30..=0xBF).contains(&c) {
                            c - 0x30
                        } else if (0xC0..=0xC7).contains(&c) {
                            c - 0xC0 + 280
                        } else {
                            c = c << 1 | bit(&mut pos)?;
                            c - 0x190 + 144
                        }
                    };
                    match sym {
                        0..=255 => out.push(sym as u8),
                        256 => break,
                        _ => {
                            let li = (sym - 257) as usize;
                            let len = LEN_BASE[li] as usize
                                + bits(&mut pos, LEN_EXTRA[li] as u32)? as usize;
                            let mut d = 0;
                            for _ in 0..5 {
                                d = d << 1 | bit(&mut pos)?;
                            }
                            let di = d as usize;
                            let dist = DIST_BASE[di] as usize
                                + bits(&mut pos, DIST_EXTRA[di] as u32)? as usize;
                            if dist > out.len() {
                                return Err("distance too far back".into());
                            }
                            for _ in 0..len {
                                out.push(out[out.len() - dist]);
                            }
                        }
                    }
                },
                t => return Err(format!("block type {t} not expected")),
            }
            if last == 1 {
                break;
            }
        }
        let at = pos.div_ceil(8);
        let want = z.get(at..at + 4).ok_or("no adler32")?;
        if want != adler32(&out).to_be_bytes() {
            return Err("adler32 mismatch".into());
        }
        Ok(out)
    }

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn deflate_round_trips() {
        let mut data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        data.extend(std::iter::repeat_n(9u8, 1000));
        data.extend_from_within(100..900);
        for d in [&[][..], &[1], &[3, 800, 1]] {
            assert_eq!(inflate(&zlib(&data, d)).unwrap(), data);
        }
        assert_eq!(inflate(&zlib(&[], &[1])).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn png_structure() {
        let (w, h) = (7u32, 5u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 5) as u8 * 50).collect();
        let png = encode(w, h, &rgb);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), w);
        assert_eq!(
            crc32(&png[12..29]),
            u32::from_be_bytes(png[29..33].try_into().unwrap())
        );
        let len = u32::from_be_bytes(png[33..37].try_into().unwrap()) as usize;
        let raw = inflate(&png[41..41 + len]).unwrap();
        assert_eq!(raw.len(), (h * (1 + 3 * w)) as usize);
        assert_eq!(&raw[1..22], &rgb[..21]);
        assert!(png.ends_with(&[0xAE, 0x42, 0x60, 0x82]));
    }
}
