namespace Hpc.CommonData.Format;

/// <summary>
/// Dataset names are <c>owner/name</c>: lower-case letters, digits, '.', '_' and '-', each part 1–64 characters,
/// not starting with '.', so a name can never be read as a path, a parent reference or a hidden file.
/// </summary>
public static class DatasetName
{
    public const int MaxPartLength = 64;

    public static string Validate(string? name) =>
        TryValidate(name, out var error) ? name! : throw new ArgumentException(error, nameof(name));

    public static bool TryValidate(string? name, out string error)
    {
        error = "";
        if (string.IsNullOrEmpty(name)) { error = "dataset name is empty"; return false; }
        var shown = name.Length > 80 ? name[..80] + "…" : name;
        shown = new string(shown.Select(c => char.IsControl(c) ? '?' : c).ToArray());
        var parts = name.Split('/');
        if (parts.Length != 2) { error = $"dataset name '{shown}' must have the form owner/name"; return false; }
        foreach (var part in parts)
        {
            if (part.Length == 0) { error = $"dataset name '{shown}' has an empty part"; return false; }
            if (part.Length > MaxPartLength) { error = $"dataset name '{shown}' has a part longer than {MaxPartLength} characters"; return false; }
            if (part[0] == '.') { error = $"dataset name '{shown}' has a part starting with '.'"; return false; }
            foreach (var c in part)
            {
                if (c is not ((>= 'a' and <= 'z') or (>= '0' and <= '9') or '.' or '_' or '-'))
                {
                    error = $"dataset name '{shown}' contains {(char.IsControl(c) ? $"control character U+{(int)c:X4}" : $"'{c}'")}; allowed are a-z 0-9 . _ -";
                    return false;
                }
            }
        }
        return true;
    }
}
