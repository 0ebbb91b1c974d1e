<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Command;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Command\Setup;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Service\SetupService;
use OCA\Istota\Service\SidecarConfig;
use OCA\Istota\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;
use Symfony\Component\Console\Command\Command;
use Symfony\Component\Console\Tester\CommandTester;

class SetupTest extends TestCase {
	private Harness $h;
	private string $dir;

	protected function setUp(): void {
		$this->h = new Harness(AppSettings::DEFAULT_SIDECAR_URL);
		$this->h->directory->system['overwrite.cli.url'] = 'https://cloud.example.com/';
		$this->dir = sys_get_temp_dir() . '/istota-setup-' . bin2hex(random_bytes(6));
		mkdir($this->dir, 0700);
	}

	protected function tearDown(): void {
		$this->h->close();
		foreach (glob($this->dir . '/{,.}*', GLOB_BRACE) ?: [] as $file) {
			if (is_file($file)) {
				unlink($file);
			}
		}
		rmdir($this->dir);
	}

	private function runCommand(array $input = []): CommandTester {
		$tester = new CommandTester(new Setup($this->h->setupService()));
		$tester->execute($input, ['capture_stderr_separately' => true]);
		return $tester;
	}

	/**
	 * Reads the TOML this command writes: sections of key = "basic string" lines.
	 *
	 * @return array<string, array<string, string>>
	 */
	private static function parseToml(string $toml): array {
		$data = [];
		$section = '';
		foreach (explode("\n", $toml) as $line) {
			if ($line === '' || str_starts_with($line, '#')) {
				continue;
			}
			if (preg_match('/^\[([a-z_]+)\]$/', $line, $m)) {
				$section = $m[1];
				continue;
			}
			self::assertMatchesRegularExpression('/^[a-z_]+ = "(?:[^"\\\\\x00-\x1f]|\\\\["\\\\ntr]|\\\\u[0-9A-F]{4})*"$/', $line, 'every value is a valid TOML basic string');
			[$key, $value] = explode(' = ', $line, 2);
			$data[$section][$key] = json_decode($value, true, 512, JSON_THROW_ON_ERROR);
		}
		return $data;
	}

	public function testPrintsTheSidecarConfig(): void {
		$tester = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());

		$config = self::parseToml($tester->getDisplay());
		$this->assertSame(['nextcloud', 'talk', 'server'], array_keys($config));
		$this->assertSame('https://cloud.example.com', $config['nextcloud']['url']);
		$this->assertMatchesRegularExpression('/^[A-Za-z0-9]{64}$/', $config['nextcloud']['shared_secret']);
		$this->assertSame($this->h->settings->sharedSecret(), $config['nextcloud']['shared_secret']);
		$this->assertTrue($this->h->appConfig->isSensitive(Application::APP_ID, AppSettings::KEY_SHARED_SECRET));
		$this->assertTrue($this->h->appConfig->isLazy(Application::APP_ID, AppSettings::KEY_SHARED_SECRET));
		$this->assertSame('Istota', $config['talk']['bot_name']);
		$this->assertSame(64, strlen($config['talk']['bot_secret']));
		$this->assertSame($this->h->settings->botSecret(), $config['talk']['bot_secret']);
		$this->assertSame('127.0.0.1:8765', $config['server']['listen']);

		$this->assertStringContainsString('registered with Talk', $tester->getErrorOutput());
		$this->assertCount(1, $this->h->dispatcher->events);
	}

	public function testReRunningKeepsEverySecret(): void {
		$first = self::parseToml($this->runCommand()->getDisplay());
		$second = self::parseToml($this->runCommand(['--sidecar-url' => 'http://127.0.0.1:9999'])->getDisplay());
		$this->assertSame($first['nextcloud']['shared_secret'], $second['nextcloud']['shared_secret']);
		$this->assertSame($first['talk']['bot_secret'], $second['talk']['bot_secret']);
		$this->assertSame('127.0.0.1:9999', $second['server']['listen']);
	}

	/** @return array<string, array{0: string, 1: string}> */
	public function sidecarUrls(): array {
		return [
			'loopback with port' => ['http://127.0.0.1:8765', '127.0.0.1:8765'],
			'lan host' => ['http://10.0.0.5:9000/', '10.0.0.5:9000'],
			'https without port' => ['https://sidecar.internal', 'sidecar.internal:443'],
			'http without port' => ['http://localhost', 'localhost:80'],
			'ipv6' => ['http://[::1]:8765', '[::1]:8765'],
		];
	}

	/** @dataProvider sidecarUrls */
	public function testSidecarUrlIsStoredAndGivesTheListenAddress(string $url, string $listen): void {
		$config = self::parseToml($this->runCommand(['--sidecar-url' => $url])->getDisplay());
		$this->assertSame($listen, $config['server']['listen']);
		$this->assertSame(rtrim($url, '/'), $this->h->settings->sidecarUrl());
		$this->assertSame($listen, SetupService::listenAddress($url));
	}

	public function testNextcloudUrlOption(): void {
		$config = self::parseToml($this->runCommand(['--nextcloud-url' => 'http://nc.lan:8080/'])->getDisplay());
		$this->assertSame('http://nc.lan:8080', $config['nextcloud']['url']);
	}

	/** @return array<string, array{0: array<string, string>}> */
	public function invalidInput(): array {
		return [
			'nextcloud url without scheme' => [['--nextcloud-url' => 'cloud.example.com']],
			'nextcloud url ftp' => [['--nextcloud-url' => 'ftp://cloud.example.com']],
			'sidecar url with query' => [['--sidecar-url' => 'http://127.0.0.1:8765/?x=1']],
			'sidecar url with credentials' => [['--sidecar-url' => 'http://u:p@127.0.0.1:8765']],
		];
	}

	/**
	 * @dataProvider invalidInput
	 * @param array<string, string> $input
	 */
	public function testInvalidUrlsChangeNothing(array $input): void {
		$tester = $this->runCommand($input);
		$this->assertSame(Command::INVALID, $tester->getStatusCode());
		$this->assertSame('', $tester->getDisplay());
		$this->assertStringContainsString('must be an http(s) URL', $tester->getErrorOutput());
		$this->assertSame('', $this->h->settings->sharedSecret());
		$this->assertSame(AppSettings::DEFAULT_SIDECAR_URL, $this->h->settings->sidecarUrl());
	}

	public function testUnknownNextcloudUrlIsAnError(): void {
		unset($this->h->directory->system['overwrite.cli.url']);
		$tester = $this->runCommand();
		$this->assertSame(Command::INVALID, $tester->getStatusCode());
		$this->assertStringContainsString('--nextcloud-url', $tester->getErrorOutput());
	}

	public function testWritesTheFileWithMode0600(): void {
		$path = $this->dir . '/istota.toml';
		file_put_contents($path, 'old');
		chmod($path, 0644);
		$tester = $this->runCommand(['--write' => $path]);

		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		clearstatcache();
		$this->assertSame(0600, fileperms($path) & 0777);
		$config = self::parseToml((string)file_get_contents($path));
		$this->assertSame($this->h->settings->sharedSecret(), $config['nextcloud']['shared_secret']);
		$this->assertStringNotContainsString($this->h->settings->sharedSecret(), $tester->getDisplay() . $tester->getErrorOutput());
		$this->assertStringContainsString('Wrote the sidecar configuration', $tester->getErrorOutput());
		$this->assertSame([$path], glob($this->dir . '/{,.}*', GLOB_BRACE) === false ? [] : array_values(array_filter(glob($this->dir . '/{,.}*', GLOB_BRACE), 'is_file')), 'no temporary file is left behind');
	}

	public function testWritingIntoAMissingDirectoryFails(): void {
		$tester = $this->runCommand(['--write' => $this->dir . '/missing/istota.toml']);
		$this->assertSame(Command::FAILURE, $tester->getStatusCode());
		$this->assertStringContainsString('does not exist', $tester->getErrorOutput());
	}

	public function testWithoutTalkTheConfigIsStillPrinted(): void {
		unset($this->h->apps->installed['spreed']);
		$tester = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$this->assertSame(64, strlen(self::parseToml($tester->getDisplay())['talk']['bot_secret']));
		$this->assertStringContainsString('not registered', $tester->getErrorOutput());
		$this->assertSame([], $this->h->dispatcher->events);
	}

	public function testTomlStringsAreEscaped(): void {
		$this->assertSame('"a \\"quoted\\" \\\\ name\\n\\u0007"', SidecarConfig::quote("a \"quoted\" \\ name\n\x07"));
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_BOT_NAME, 'The "Bot"');
		$config = self::parseToml($this->runCommand()->getDisplay());
		$this->assertSame('The "Bot"', $config['talk']['bot_name']);
	}
}
