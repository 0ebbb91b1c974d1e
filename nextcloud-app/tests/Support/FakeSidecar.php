<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

/**
 * FakeSidecar runs tests/fixtures/fake-sidecar.php under PHP's built-in web server on a
 * free loopback port, and reads back what it received.
 */
final class FakeSidecar {
	/** @var resource */
	private $process;

	private function __construct(
		public readonly string $url,
		public readonly string $secret,
		private readonly string $stateDir,
		$process,
	) {
		$this->process = $process;
	}

	public static function start(string $secret): self {
		$port = self::freePort();
		$stateDir = sys_get_temp_dir() . '/istota-fake-sidecar-' . bin2hex(random_bytes(6));
		mkdir($stateDir, 0700);
		$env = getenv();
		$env['FAKE_SIDECAR_SECRET'] = $secret;
		$env['FAKE_SIDECAR_STATE'] = $stateDir;
		$log = $stateDir . '/server.log';
		$process = proc_open(
			[PHP_BINARY, '-S', '127.0.0.1:' . $port, dirname(__DIR__) . '/fixtures/fake-sidecar.php'],
			[0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']],
			$pipes,
			$stateDir,
			$env,
		);
		if (!is_resource($process)) {
			throw new \RuntimeException('could not start php -S');
		}
		$sidecar = new self('http://127.0.0.1:' . $port, $secret, $stateDir, $process);
		$sidecar->waitUntilUp();
		return $sidecar;
	}

	/** A loopback URL where nothing listens: connections are refused at once. */
	public static function deadUrl(): string {
		return 'http://127.0.0.1:' . self::freePort();
	}

	public function stop(): void {
		if (is_resource($this->process)) {
			proc_terminate($this->process);
			proc_close($this->process);
		}
		foreach (glob($this->stateDir . '/*') ?: [] as $file) {
			unlink($file);
		}
		@rmdir($this->stateDir);
	}

	/** Forgets everything received and every instruction; the server keeps running. */
	public function reset(): void {
		foreach (['control.json', 'requests.jsonl', 'events.jsonl', 'duplicates.jsonl', 'nonces.json', 'seen.json', 'users.json', 'usermd.json', 'facts.json', 'admin.json', 'bodies.jsonl', 'homes.json', 'mailboxes.json'] as $file) {
			@unlink($this->stateDir . '/' . $file);
		}
	}

	/** @param array<string, mixed> $control see fake-sidecar.php */
	public function control(array $control): void {
		file_put_contents($this->stateDir . '/control.json', json_encode($control));
	}

	/** @return list<array{payload: array, addressed: bool}> accepted Talk events, in arrival order */
	public function events(): array {
		return $this->readLines('events.jsonl');
	}

	/** @return list<string> "token/message id" of every accepted Create/Activity event, in order */
	public function eventKeys(): array {
		return array_map(
			static fn (array $e): string => $e['payload']['conversation']['token'] . '/' . ($e['payload']['event']['object']['id'] ?? ''),
			$this->events(),
		);
	}

	/** @return list<array{token: string, message_id: string}> redeliveries the sidecar recognised */
	public function duplicates(): array {
		return $this->readLines('duplicates.jsonl');
	}

	/** @return list<array{method: string, path: string, body: mixed}> bodies of the settings API, decoded */
	public function bodies(): array {
		return $this->readLines('bodies.jsonl');
	}

	/** @return array<string, array<string, mixed>> uid => the last session profile */
	public function users(): array {
		$users = json_decode((string)@file_get_contents($this->stateDir . '/users.json'), true);
		return is_array($users) ? $users : [];
	}

	/** @return array<string, array{token: string, welcomes: int}> uid => the conversation the app reported */
	public function homes(): array {
		$homes = json_decode((string)@file_get_contents($this->stateDir . '/homes.json'), true);
		return is_array($homes) ? $homes : [];
	}

	/** Writes USER.md of $uid as if it had been changed in Files. */
	public function setUserMemory(string $uid, string $content): void {
		$file = $this->stateDir . '/usermd.json';
		$all = json_decode((string)@file_get_contents($file), true);
		$all = is_array($all) ? $all : [];
		$all[$uid] = $content;
		file_put_contents($file, json_encode($all));
	}

	/** @return list<array{method: string, uri: string, status: int}> */
	public function requests(): array {
		return $this->readLines('requests.jsonl');
	}

	private function readLines(string $file): array {
		$path = $this->stateDir . '/' . $file;
		if (!is_file($path)) {
			return [];
		}
		$lines = array_filter(explode("\n", (string)file_get_contents($path)), static fn (string $l): bool => $l !== '');
		return array_values(array_map(static fn (string $l): array => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $lines));
	}

	private function waitUntilUp(): void {
		$deadline = microtime(true) + 15;
		$address = substr($this->url, strlen('http://'));
		while (microtime(true) < $deadline) {
			$socket = @stream_socket_client('tcp://' . $address, $errno, $errstr, 0.2);
			if ($socket !== false) {
				fclose($socket);
				return;
			}
			$status = proc_get_status($this->process);
			if (!$status['running']) {
				break;
			}
			usleep(20000);
		}
		$log = (string)@file_get_contents($this->stateDir . '/server.log');
		$this->stop();
		throw new \RuntimeException('the fake sidecar did not start: ' . $log);
	}

	private static function freePort(): int {
		$server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
		if ($server === false) {
			throw new \RuntimeException('no free port: ' . $errstr);
		}
		$name = (string)stream_socket_get_name($server, false);
		fclose($server);
		return (int)substr($name, strrpos($name, ':') + 1);
	}
}
