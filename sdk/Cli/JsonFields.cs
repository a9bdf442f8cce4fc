using System.Globalization;
using System.Text;
using System.Text.Json;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A verb's result line for scripts (<c>--json</c>): one JSON object on one line, its keys in camelCase as every
/// <c>--json</c> of ours names them, from the same fields the human line prints.
/// </summary>
public static class JsonFields
{
    /// <summary>The object of <paramref name="fields"/>, in order; a null value is left out, numbers and booleans written as such.</summary>
    public static string Object(IEnumerable<(string Key, object? Value)> fields)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartObject();
            foreach (var (key, value) in fields)
            {
                var name = CamelCase(key);
                switch (value)
                {
                    case null: break;
                    case bool b: json.WriteBoolean(name, b); break;
                    case int i: json.WriteNumber(name, i); break;
                    case long l: json.WriteNumber(name, l); break;
                    case double d: json.WriteNumber(name, d); break;
                    case IEnumerable<string> list:
                        json.WriteStartArray(name);
                        foreach (var item in list) json.WriteStringValue(item);
                        json.WriteEndArray();
                        break;
                    default: json.WriteString(name, Convert.ToString(value, CultureInfo.InvariantCulture)); break;
                }
            }
            json.WriteEndObject();
        }
        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    /// <summary>
    /// The <c>key=value</c> pairs of a result line's text (<c>" fanout=mpi ranks=8 ring-seconds=1.204"</c>), numbers as
    /// numbers: what a verb that builds its line piece by piece hands to <see cref="Object"/>.
    /// </summary>
    public static IEnumerable<(string Key, object? Value)> Parse(string keyValues)
    {
        foreach (var pair in keyValues.Split(' ', StringSplitOptions.RemoveEmptyEntries))
        {
            var equals = pair.IndexOf('=');
            if (equals <= 0) continue;
            var text = pair[(equals + 1)..];
            yield return (pair[..equals], long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var l) ? l
                : double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out var d) ? d : text);
        }
    }

    /// <summary><c>ring-seconds</c> → <c>ringSeconds</c>; a key already in camelCase is kept.</summary>
    public static string CamelCase(string key)
    {
        var sb = new StringBuilder(key.Length);
        var upper = false;
        foreach (var c in key)
        {
            if (c is '-' or '_') { upper = sb.Length > 0; continue; }
            sb.Append(upper ? char.ToUpperInvariant(c) : c);
            upper = false;
        }
        return sb.ToString();
    }
}
