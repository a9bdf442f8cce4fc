using Hpc.Fuzzing;

// Hpc.Fuzz TARGET                 one input on stdin per run, under afl-fuzz with SharpFuzz's instrumentation
// Hpc.Fuzz TARGET --replay DIR    every file in DIR through the target in this process (a corpus or AFL's crashes)
// Hpc.Fuzz seeds DIR              writes each target's starting inputs into DIR/TARGET/
if (args is ["seeds", var corpus])
{
    foreach (var name in FuzzTargets.All.Keys)
        foreach (var (file, bytes) in Seeds.For(name))
            File.WriteAllBytes(Path.Combine(Directory.CreateDirectory(Path.Combine(corpus, name)).FullName, file), bytes);
    return 0;
}
if (args.Length == 0 || !FuzzTargets.All.TryGetValue(args[0], out var target))
{
    Console.Error.WriteLine($"usage: Hpc.Fuzz {string.Join('|', FuzzTargets.All.Keys)} [--replay DIR]");
    return 2;
}
if (args is [_, "--replay", var dir])
{
    var failed = 0;
    var files = Directory.GetFiles(dir);
    foreach (var file in files)
    {
        try { target(File.ReadAllBytes(file)); }
        catch (Exception e)
        {
            failed++;
            Console.Error.WriteLine($"{Path.GetFileName(file)}: {e.GetType().Name}: {e.Message}");
        }
    }
    Console.WriteLine($"{args[0]}: {files.Length} inputs, {failed} failed");
    return failed == 0 ? 0 : 1;
}
SharpFuzz.Fuzzer.OutOfProcess.Run(stream =>
{
    using var copy = new MemoryStream();
    stream.CopyTo(copy);
    target(copy.ToArray());
});
return 0;
