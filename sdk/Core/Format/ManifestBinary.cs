using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using Hpc.CommonData.Access;

namespace Hpc.CommonData.Format;

/// <summary>
/// The compact manifest encoding: "HCDM", an encoding version, then the fields in a fixed order — lengths as LEB128
/// varints, segment ids as 32 raw bytes (BLAKE3-256), the whole-dataset hash as 16 (XXH3-128). A segment costs about
/// 38 bytes instead of JSON's ~100, so a manifest is ~0.6 MB per GB of 64 KB segments and the 48 MB a stored segment may
/// hold reaches ~80 GB of data. The encoding version says which hash names the segments: encoding 1 (XXH3-128 ids) is
/// refused with a request to re-stage, as are JSON manifests, which all carry XXH3-128 ids.
/// </summary>
internal static class ManifestBinary
{
    private static ReadOnlySpan<byte> Magic => "HCDM"u8;

    /// <summary>Encoding 1: everything a format 1 or 2 manifest holds, segments named by XXH3-128 (16 bytes each).</summary>
    private const byte Encoding1 = 1;

    /// <summary>Encoding 2: as encoding 1, segments named by BLAKE3-256 (32 bytes each).</summary>
    private const byte Encoding2 = 2;

    public static bool IsBinary(ReadOnlySpan<byte> data) => data.StartsWith(Magic);

    public static byte[] Write(Manifest m)
    {
        var w = new ArrayBufferWriter<byte>(64 + m.Segments.Count * 24 + (m.Files?.Count ?? 0) * 48);
        w.Write(Magic);
        Byte(w, Encoding2);
        Varint(w, (ulong)m.Format);
        Text(w, m.Name);
        Fixed64(w, m.Created.ToUnixTimeMilliseconds());
        Varint(w, m.LifetimeSeconds is { } life ? (ulong)life + 1 : 0);
        Varint(w, (ulong)m.RawLength);
        Varint(w, (ulong)m.StoredLength);
        Hash(w, Manifest.ParseDatasetHash(m.Hash));
        Varint(w, (ulong)m.SegmentSize);
        Text(w, m.Chunking ?? "");
        Varint(w, (ulong)m.Segments.Count);
        var ids = m.SegmentIds;
        for (var i = 0; i < ids.Count; i++)
        {
            Id(w, ids[i]);
            Varint(w, (ulong)m.Segments[i].RawLength);
            Varint(w, (ulong)m.Segments[i].StoredLength);
        }
        // Counts are stored plus one, so "none" (null) and "an empty list" stay different, as in JSON.
        Varint(w, m.Files is null ? 0 : (ulong)m.Files.Count + 1);
        foreach (var f in m.Files ?? [])
        {
            Text(w, f.Path);
            Varint(w, (ulong)f.Offset);
            Varint(w, (ulong)f.Length);
            Varint(w, (ulong)f.Mode);
            Byte(w, (byte)f.Type);
            Text(w, f.Target ?? "");
            // Times plus one, so "not recorded" (0) stays apart from the epoch itself.
            Varint(w, f.ModifiedNanoseconds is { } t ? ZigZag(t) + 1 : 0);
        }
        Varint(w, m.Readers is null ? 0UL : 1UL);
        if (m.Readers is { } readers)
        {
            Varint(w, (ulong)readers.Users.Count);
            foreach (var u in readers.Users) Varint(w, u);
            Varint(w, (ulong)readers.Groups.Count);
            foreach (var g in readers.Groups) Varint(w, g);
        }
        return w.WrittenSpan.ToArray();
    }

    /// <summary>Decodes; throws <see cref="InvalidDataException"/> for anything malformed (the caller then checks consistency).</summary>
    public static Manifest Read(ReadOnlySpan<byte> data)
    {
        var r = new Reader(data[Magic.Length..]);
        var encoding = r.Byte();
        if (encoding == Encoding1) throw new InvalidDataException(Manifest.LegacyIds);
        if (encoding != Encoding2) throw new InvalidDataException($"manifest encoding {encoding} is not supported (this build reads encoding {Encoding2})");
        var format = checked((int)r.Varint());
        var name = r.Text();
        var created = DateTimeOffset.FromUnixTimeMilliseconds(r.Fixed64());
        var life = r.Varint();
        var rawLength = checked((long)r.Varint());
        var storedLength = checked((long)r.Varint());
        var hash = r.Hash();
        var segmentSize = checked((int)r.Varint());
        var chunking = r.Text();
        var count = r.Count(minimumBytesEach: SegmentId.ByteLength + 2);
        var segments = new ManifestSegment[count];
        var ids = new SegmentId[count];
        for (var i = 0; i < count; i++)
        {
            ids[i] = r.Id();
            segments[i] = new ManifestSegment(ids[i].ToString(), checked((int)r.Varint()), checked((int)r.Varint()));
        }
        List<DatasetFile>? files = null;
        var fileCount = r.Varint();
        if (fileCount > 0)
        {
            if (fileCount - 1 > (ulong)r.Remaining / 4) throw new InvalidDataException("manifest file count exceeds its bytes");
            files = new List<DatasetFile>((int)(fileCount - 1));
            for (ulong i = 1; i < fileCount; i++)
            {
                var file = new DatasetFile(r.Text(), checked((long)r.Varint()), checked((long)r.Varint()), checked((int)r.Varint()));
                var type = r.Byte();
                if (type > (byte)DatasetEntryType.HardLink) throw new InvalidDataException($"manifest entry type {type} is unknown");
                var target = r.Text();
                var time = r.Varint();
                files.Add(file with { Type = (DatasetEntryType)type, Target = target.Length == 0 ? null : target, ModifiedNanoseconds = time == 0 ? null : UnZigZag(time - 1) });
            }
        }
        DatasetReaders? readers = null;
        if (r.Varint() == 1)
        {
            var users = new uint[r.Count(minimumBytesEach: 1)];
            for (var i = 0; i < users.Length; i++) users[i] = checked((uint)r.Varint());
            var groups = new uint[r.Count(minimumBytesEach: 1)];
            for (var i = 0; i < groups.Length; i++) groups[i] = checked((uint)r.Varint());
            readers = new DatasetReaders { Users = users, Groups = groups };
        }
        if (r.Remaining != 0) throw new InvalidDataException($"manifest has {r.Remaining} bytes after its end");
        var manifest = new Manifest
        {
            Format = format, Name = name, Created = created, LifetimeSeconds = life == 0 ? null : checked((long)(life - 1)),
            RawLength = rawLength, StoredLength = storedLength, Hash = Manifest.FormatDatasetHash(hash), SegmentSize = segmentSize,
            Chunking = chunking.Length == 0 ? null : chunking, Segments = segments, Files = files, Readers = readers,
        };
        manifest.UseParsedIds(ids);
        return manifest;
    }

    private static ulong ZigZag(long v) => (ulong)((v << 1) ^ (v >> 63));

    private static long UnZigZag(ulong v) => (long)(v >> 1) ^ -(long)(v & 1);

    private static void Byte(IBufferWriter<byte> w, byte b) { w.GetSpan(1)[0] = b; w.Advance(1); }

    private static void Varint(IBufferWriter<byte> w, ulong v)
    {
        var span = w.GetSpan(10);
        var n = 0;
        while (v >= 0x80) { span[n++] = (byte)(v | 0x80); v >>= 7; }
        span[n++] = (byte)v;
        w.Advance(n);
    }

    private static void Fixed64(IBufferWriter<byte> w, long v) { BinaryPrimitives.WriteInt64LittleEndian(w.GetSpan(8), v); w.Advance(8); }

    private static void Id(IBufferWriter<byte> w, SegmentId id) { id.WriteBytes(w.GetSpan(SegmentId.ByteLength)); w.Advance(SegmentId.ByteLength); }

    private static void Hash(IBufferWriter<byte> w, UInt128 hash) { BinaryPrimitives.WriteUInt128BigEndian(w.GetSpan(16), hash); w.Advance(16); }

    private static void Text(IBufferWriter<byte> w, string s)
    {
        var n = Encoding.UTF8.GetByteCount(s);
        Varint(w, (ulong)n);
        Encoding.UTF8.GetBytes(s, w.GetSpan(n));
        w.Advance(n);
    }

    private ref struct Reader(ReadOnlySpan<byte> data)
    {
        private ReadOnlySpan<byte> _rest = data;

        public readonly int Remaining => _rest.Length;

        public byte Byte()
        {
            if (_rest.IsEmpty) throw Truncated();
            var b = _rest[0];
            _rest = _rest[1..];
            return b;
        }

        public ulong Varint()
        {
            ulong v = 0;
            for (var shift = 0; shift < 64; shift += 7)
            {
                var b = Byte();
                v |= (ulong)(b & 0x7f) << shift;
                if (b < 0x80)
                {
                    if (shift == 63 && b > 1) break;
                    return v;
                }
            }
            throw new InvalidDataException("manifest holds a malformed number");
        }

        /// <summary>A count that cannot exceed what the remaining bytes could hold, so a damaged one cannot make us allocate gigabytes.</summary>
        public int Count(int minimumBytesEach)
        {
            var n = Varint();
            if (n > (ulong)(_rest.Length / minimumBytesEach)) throw new InvalidDataException("manifest list length exceeds its bytes");
            return (int)n;
        }

        public long Fixed64()
        {
            if (_rest.Length < 8) throw Truncated();
            var v = BinaryPrimitives.ReadInt64LittleEndian(_rest);
            _rest = _rest[8..];
            return v;
        }

        public SegmentId Id()
        {
            if (_rest.Length < SegmentId.ByteLength) throw Truncated();
            var id = SegmentId.FromBytes(_rest);
            _rest = _rest[SegmentId.ByteLength..];
            return id;
        }

        public UInt128 Hash()
        {
            if (_rest.Length < 16) throw Truncated();
            var hash = BinaryPrimitives.ReadUInt128BigEndian(_rest);
            _rest = _rest[16..];
            return hash;
        }

        public string Text()
        {
            var n = Varint();
            if (n > (ulong)_rest.Length) throw Truncated();
            string s;
            try { s = new UTF8Encoding(false, true).GetString(_rest[..(int)n]); }
            catch (DecoderFallbackException) { throw new InvalidDataException("manifest holds text that is not UTF-8"); }
            _rest = _rest[(int)n..];
            return s;
        }

        private static InvalidDataException Truncated() => new("manifest is truncated");
    }
}
