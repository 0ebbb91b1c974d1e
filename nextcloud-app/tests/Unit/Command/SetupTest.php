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
use OCA\Istota\Service\InstallCommand;
use OCA\Istota\Service\SetupService;
use OCA\Istota\Service\SidecarConfig;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\TestUser;
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
		$tester = new CommandTester(new Setup($this->h->setupService(), $this->h->installCommand(), $this->h->homeConversation()));
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

	public function testWhenTheServiceDoesNotAnswerItNamesTheInstallCommand(): void {
		$dead = FakeSidecar::deadUrl();
		$tester = $this->runCommand(['--sidecar-url' => $dead]);
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$notes = $tester->getErrorOutput();
		$this->assertStringContainsString('The Istota service does not answer at ' . $dead . ' yet.', $notes);
		$arch = php_uname('m') === 'aarch64' ? 'arm64' : 'amd64';
		$this->assertStringContainsString("\n  sudo " . Harness::APP_PATH . '/bin/' . $arch . '/istota install', $notes);
		$this->assertStringNotContainsString('istota install', $tester->getDisplay(), 'standard output is the TOML alone');
	}

	public function testARunningServiceNeedsNoInstallCommand(): void {
		$sidecar = FakeSidecar::start('setup-test-shared-secret-0123456789-abcdefghij');
		try {
			$tester = $this->runCommand(['--sidecar-url' => $sidecar->url]);
		} finally {
			$sidecar->stop();
		}
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$this->assertStringNotContainsString('istota install', $tester->getErrorOutput());
	}

	/** @return array<string, array{0: string, 1: string, 2: string}> */
	public static function machines(): array {
		return [
			'x86_64' => ['/var/www/nextcloud/apps/istota', 'x86_64', 'sudo /var/www/nextcloud/apps/istota/bin/amd64/istota install'],
			'aarch64' => ['/srv/nc/custom_apps/istota/', 'aarch64', 'sudo /srv/nc/custom_apps/istota/bin/arm64/istota install'],
			'a space in the path' => ['/srv/my cloud/apps/istota', 'x86_64', "sudo '/srv/my cloud/apps/istota/bin/amd64/istota' install"],
			'no binary for riscv64' => ['/var/www/nextcloud/apps/istota', 'riscv64', ''],
		];
	}

	/** @dataProvider machines */
	public function testInstallCommandForEachMachine(string $appPath, string $machine, string $want): void {
		$this->assertSame($want, InstallCommand::forMachine($appPath, $machine));
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
		$this->assertSame(Command::FAILURE, $tester->getStatusCode(), 'an unregistered bot is not a complete setup');
		$this->assertSame(64, strlen(self::parseToml($tester->getDisplay())['talk']['bot_secret']));
		$this->assertStringContainsString('not registered', $tester->getErrorOutput());
		$this->assertSame([], $this->h->dispatcher->events);
	}

	public function testTomlStringsAreEscaped(): void {
		$this->assertSame('"a \\"quoted\\" \\\\ name\\n\\u0007"', SidecarConfig::quote("a \"quoted\" \\ name\n\x07"));
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_BOT_NAME, 'The "Bot"');
		$config = self::parseToml($this->runCommand()->getDisplay());
		$this->assertSame('The "Bot"', $config['talk']['bot_name']);

		$direct = new SidecarConfig('https://c.example', 's', 'b', 't', '127.0.0.1:1', "o'brien", "p\"w\\d#=\n");
		$this->assertSame(['url' => 'https://c.example', 'shared_secret' => 's', 'bot_user' => "o'brien", 'bot_password' => "p\"w\\d#=\n"], self::parseToml($direct->toToml())['nextcloud']);
	}

	public function testCreatesTheBotAccount(): void {
		$tester = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$nextcloud = self::parseToml($tester->getDisplay())['nextcloud'];

		$this->assertSame(['url', 'shared_secret', 'bot_user', 'bot_password'], array_keys($nextcloud));
		$this->assertSame('istota', $nextcloud['bot_user']);
		$password = $nextcloud['bot_password'];
		$this->assertSame(48, strlen($password));
		$this->assertMatchesRegularExpression('/[A-Z]/', $password);
		$this->assertMatchesRegularExpression('/[a-z]/', $password);
		$this->assertMatchesRegularExpression('/[0-9]/', $password);
		$this->assertMatchesRegularExpression('/[-_.!@#%+=]/', $password);

		$user = $this->h->directory->users['istota'] ?? null;
		$this->assertInstanceOf(TestUser::class, $user);
		$this->assertSame($password, $user->password, 'the account opens with the password in the TOML');
		$this->assertSame('Istota', $user->getDisplayName(), 'the display name is the bot name');
		$this->assertSame($password, $this->h->settings->botPassword());
		$this->assertTrue($this->h->appConfig->isSensitive(Application::APP_ID, AppSettings::KEY_BOT_PASSWORD));
		$this->assertTrue($this->h->appConfig->isLazy(Application::APP_ID, AppSettings::KEY_BOT_PASSWORD));
		$this->assertStringContainsString('Created the Nextcloud user "istota"', $tester->getErrorOutput());
		$this->assertStringNotContainsString($password, $tester->getErrorOutput());
	}

	public function testReRunningKeepsTheBotPassword(): void {
		$first = self::parseToml($this->runCommand()->getDisplay())['nextcloud'];
		$tester = $this->runCommand();
		$second = self::parseToml($tester->getDisplay())['nextcloud'];
		$this->assertSame($first['bot_password'], $second['bot_password']);
		$this->assertSame(0, $this->h->directory->users['istota']->passwordChanges);
		$this->assertStringContainsString('its password is unchanged', $tester->getErrorOutput());
	}

	public function testAdoptsAnExistingAccountWithoutTouchingItsPassword(): void {
		$user = $this->h->directory->addUser('istota', 'Old Name', null, [], [], 'chosen-by-a-human');
		$tester = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());

		$nextcloud = self::parseToml($tester->getDisplay())['nextcloud'];
		$this->assertSame('istota', $nextcloud['bot_user']);
		$this->assertArrayNotHasKey('bot_password', $nextcloud, 'an unknown password is left out');
		$this->assertSame('chosen-by-a-human', $user->password);
		$this->assertSame(0, $user->passwordChanges);
		$this->assertSame('', $this->h->settings->botPassword());
		$this->assertSame('Istota', $user->displayName);
		$this->assertStringContainsString('--reset-bot-password', $tester->getErrorOutput());
		$this->assertStringContainsString('does not know its password', $tester->getErrorOutput());
	}

	public function testResetBotPasswordGivesAnAdoptedAccountANewOne(): void {
		$user = $this->h->directory->addUser('istota', 'Istota', null, [], [], 'chosen-by-a-human');
		$tester = $this->runCommand(['--reset-bot-password' => true]);
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$password = self::parseToml($tester->getDisplay())['nextcloud']['bot_password'];
		$this->assertSame($password, $user->password);
		$this->assertSame(1, $user->passwordChanges);
		$this->assertSame($password, $this->h->settings->botPassword());
		$this->assertStringContainsString('new password', $tester->getErrorOutput());
		$this->assertStringNotContainsString($password, $tester->getErrorOutput());

		$again = self::parseToml($this->runCommand()->getDisplay())['nextcloud'];
		$this->assertSame($password, $again['bot_password'], 'known from now on');
		$this->assertSame(1, $user->passwordChanges);
	}

	public function testAPasswordChangedByHandIsForgotten(): void {
		$this->runCommand();
		$this->h->directory->users['istota']->password = 'changed-in-the-admin-ui';
		$nextcloud = self::parseToml($this->runCommand()->getDisplay())['nextcloud'];
		$this->assertArrayNotHasKey('bot_password', $nextcloud);
		$this->assertSame('', $this->h->settings->botPassword());
		$this->assertSame('changed-in-the-admin-ui', $this->h->directory->users['istota']->password);
	}

	public function testBotUserOption(): void {
		$nextcloud = self::parseToml($this->runCommand(['--bot-user' => 'assistant'])->getDisplay())['nextcloud'];
		$this->assertSame('assistant', $nextcloud['bot_user']);
		$this->assertSame($nextcloud['bot_password'], $this->h->directory->users['assistant']->password);
		$this->assertArrayNotHasKey('istota', $this->h->directory->users);
		$this->assertSame('assistant', $this->h->settings->botUser());

		$again = self::parseToml($this->runCommand()->getDisplay())['nextcloud'];
		$this->assertSame('assistant', $again['bot_user'], 'the stored bot user is kept');
		$this->assertSame($nextcloud['bot_password'], $again['bot_password']);
	}

	public function testSwitchingToAnExistingUserDoesNotReuseTheOldPassword(): void {
		$this->runCommand();
		$this->h->directory->addUser('assistant', 'Assistant', null, [], [], 'its-own-password');
		$nextcloud = self::parseToml($this->runCommand(['--bot-user' => 'assistant'])->getDisplay())['nextcloud'];
		$this->assertSame('assistant', $nextcloud['bot_user']);
		$this->assertArrayNotHasKey('bot_password', $nextcloud);
	}

	/** @return array<string, array{0: string}> */
	public function invalidBotUsers(): array {
		return [
			'slash' => ['a/b'],
			'dot dot' => ['..'],
			'too long' => [str_repeat('x', 65)],
			'umlaut' => ['bötli'],
			'newline' => ["bot\nname"],
		];
	}

	/** @dataProvider invalidBotUsers */
	public function testAnInvalidBotUserChangesNothing(string $uid): void {
		$tester = $this->runCommand(['--bot-user' => $uid]);
		$this->assertSame(Command::INVALID, $tester->getStatusCode());
		$this->assertSame('', $tester->getDisplay());
		$this->assertStringContainsString('--bot-user must be a Nextcloud user id', $tester->getErrorOutput());
		$this->assertSame([], $this->h->directory->users);
		$this->assertSame(AppSettings::DEFAULT_BOT_USER, $this->h->settings->botUser());
		$this->assertSame('', $this->h->settings->sharedSecret());
	}

	/** @return array<string, array{0: \Throwable|false, 1: string}> */
	public function creationFailures(): array {
		return [
			'refused' => [new \InvalidArgumentException('The user name is reserved'), 'The user name is reserved'],
			'no backend' => [false, 'no user backend accepted it'],
		];
	}

	/** @dataProvider creationFailures */
	public function testAFailedAccountCreationFailsTheCommand(\Throwable|false $failure, string $message): void {
		$this->h->directory->createFailure = $failure;
		$tester = $this->runCommand();
		$this->assertSame(Command::FAILURE, $tester->getStatusCode());
		$this->assertSame('', $tester->getDisplay(), 'no configuration without the account');
		$this->assertStringContainsString('Could not set up the bot account', $tester->getErrorOutput());
		$this->assertStringContainsString($message, $tester->getErrorOutput());
		$this->assertSame([], $this->h->directory->users);
		// The next run creates the account again, with a new password.
		$this->h->directory->createFailure = null;
		$again = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $again->getStatusCode(), $again->getErrorOutput());
		$this->assertSame($this->h->settings->botPassword(), self::parseToml($again->getDisplay())['nextcloud']['bot_password']);
	}

	/**
	 * Nextcloud made the account and then failed (a hook threw): the password Istota chose
	 * was stored first, so running setup again adopts the account without a reset.
	 */
	public function testAnAccountCreatedBeforeAFailureIsAdoptedOnTheNextRun(): void {
		$this->h->directory->failAfterCreate = new \RuntimeException('a listener failed');
		$tester = $this->runCommand();
		$this->assertSame(Command::FAILURE, $tester->getStatusCode());
		$this->assertStringContainsString('run occ istota:setup again', $tester->getErrorOutput());
		$this->h->directory->failAfterCreate = null;

		$again = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $again->getStatusCode(), $again->getErrorOutput());
		$this->assertStringNotContainsString('does not know its password', $again->getErrorOutput());
		$password = self::parseToml($again->getDisplay())['nextcloud']['bot_password'];
		$this->assertNotSame('', $password);
		$this->assertNotFalse($this->h->directory->checkPassword('istota', $password));
	}

	public function testResetOnABackendThatCannotChangePasswordsFails(): void {
		$user = $this->h->directory->addUser('istota', 'Istota', null, [], [], 'ldap-password');
		$user->passwordChangeable = false;
		$tester = $this->runCommand(['--reset-bot-password' => true]);
		$this->assertSame(Command::FAILURE, $tester->getStatusCode());
		$this->assertStringContainsString('cannot change passwords', $tester->getErrorOutput());
		$this->assertSame('ldap-password', $user->password);
	}

	public function testWarnsAboutADisabledAccountAndAFixedDisplayName(): void {
		$user = $this->h->directory->addUser('istota', 'Robot', null, [], [], 'x');
		$user->enabled = false;
		$user->displayNameChangeable = false;
		$tester = $this->runCommand();
		$this->assertSame(Command::SUCCESS, $tester->getStatusCode());
		$this->assertStringContainsString('is disabled', $tester->getErrorOutput());
		$this->assertStringContainsString('occ user:enable istota', $tester->getErrorOutput());
		$this->assertStringContainsString('Could not set the display name of "istota"', $tester->getErrorOutput());
		$this->assertSame('Robot', $user->displayName);
	}
}
