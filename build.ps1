#!/usr/bin/env pwsh
# Restore, build, test and pack. Usage: ./build.ps1 [-Configuration Release] [-SkipTests]
param(
    [string]$Configuration = "Release",
    [switch]$SkipTests
)
$ErrorActionPreference = "Stop"
Set-Location $PSScriptRoot

function Invoke-Step([string]$Name, [scriptblock]$Command) {
    Write-Host "==> $Name"
    & $Command
    if ($LASTEXITCODE -ne 0) { throw "$Name failed with exit code $LASTEXITCODE" }
}

Invoke-Step "restore" { dotnet restore Hpc.sln }
Invoke-Step "build"   { dotnet build Hpc.sln -c $Configuration --no-restore }
if (-not $SkipTests) {
    Invoke-Step "test" { dotnet test Hpc.sln -c $Configuration --no-build }
}
Invoke-Step "pack"    { dotnet pack sdk/Hpc.CommonData.csproj -c $Configuration --no-build -o artifacts/packages }
Write-Host "done: packages in artifacts/packages"
