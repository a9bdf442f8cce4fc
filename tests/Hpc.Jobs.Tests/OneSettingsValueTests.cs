namespace Hpc.Jobs.Tests;

/// <summary>
/// One value for every program: a setting resolves the same way whichever verb reads it (the command line over the
/// environment over client.conf).
/// </summary>
public class OneSettingsValueTests
{
    [Fact]
    public async Task A_password_file_on_the_command_line_wins_over_the_variable_for_stage_as_for_list()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");
        var file = s.WriteFile("password", "tier-secret\n"u8.ToArray());
        var wrongInTheEnvironment = new Dictionary<string, string?> { [Hpc.CommonData.Cache.CacheTierOptions.PasswordVariable] = "wrong" };

        var stage = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(10_000)), "--name", "risk/file-wins",
            "--cache-hosts", s.HostList, "--cache-password-file", file], wrongInTheEnvironment);
        var list = await s.HpcdataAsync(["list", "risk/file-wins", "--cache-hosts", s.HostList, "--cache-password-file", file], wrongInTheEnvironment);

        Assert.True(stage.Code == 0, $"stage: exit {stage.Code}: {stage.Stderr}");
        Assert.True(list.Code == 0, $"list: exit {list.Code}: {list.Stderr}");
    }
}
