<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\FakeSidecarTestCase;
use OCA\Istota\Tests\Support\Harness;
use OCP\AppFramework\Http\DataResponse;

/**
 * No secret the app knows (shared secret, Talk bot secret, bot account password) and no
 * model API key an admin typed ever reaches a browser through the OCS API or the log, in
 * success and in failure.
 */
class NoSecretsTest extends FakeSidecarTestCase {
	private const BOT_PASSWORD = 'bot-account-password-0123456789-xyz';
	private const API_KEY = 'sk-ant-no-secrets-0123456789-abcdefghijklmnop';

	/** @return list<\Closure(Harness): DataResponse> */
	private static function everyAction(): array {
		return [
			static fn (Harness $h) => $h->meController()->me(),
			static fn (Harness $h) => $h->meController()->status(),
			static fn (Harness $h) => $h->meController()->events(11),
			static fn (Harness $h) => $h->meController()->stop(),
			static fn (Harness $h) => $h->meController()->wsToken(),
			static fn (Harness $h) => $h->memoryController()->userMemory(),
			static fn (Harness $h) => $h->memoryController()->saveUserMemory(self::API_KEY, '"stale"'),
			static fn (Harness $h) => $h->memoryController()->audit(),
			static fn (Harness $h) => $h->memoryController()->channels(),
			static fn (Harness $h) => $h->memoryController()->dated(),
			static fn (Harness $h) => $h->memoryController()->facts(),
			static fn (Harness $h) => $h->memoryController()->invalidateFact(1),
			static fn (Harness $h) => $h->memoryController()->deleteFact(2),
			static fn (Harness $h) => $h->memoryController()->search('tea'),
			static fn (Harness $h) => $h->scheduleController()->schedule(),
			static fn (Harness $h) => $h->scheduleController()->jobAction('morning', 'run'),
			static fn (Harness $h) => $h->personalSettingsController()->get(),
			static fn (Harness $h) => $h->personalSettingsController()->update(persona: 'kind', timezone: 'Nowhere/Else'),
			static fn (Harness $h) => $h->adminController()->health(),
			static fn (Harness $h) => $h->adminController()->updateSettings(brain: ['api_key' => self::API_KEY]),
			static fn (Harness $h) => $h->adminController()->settings(),
			static fn (Harness $h) => $h->adminController()->updateSettings(workers: ['max' => -1], brain: ['api_key' => self::API_KEY]),
		];
	}

	/** @return array<string, array{0: string}> */
	public function situations(): array {
		return [
			'sidecar up' => ['up'],
			'sidecar down' => ['down'],
			'sidecar failing' => ['failing'],
		];
	}

	/** @dataProvider situations */
	public function testNoResponseOrLogLineHoldsASecret(string $situation): void {
		$h = new Harness($situation === 'down' ? FakeSidecar::deadUrl() : self::$sidecar->url, self::SECRET);
		try {
			if ($situation === 'failing') {
				self::$sidecar->control(['api_status' => 503]);
			}
			$botSecret = $h->settings->ensureBotSecret();
			$h->settings->setBotPassword(self::BOT_PASSWORD);
			$h->directory->addUser('root', 'Root', 'root@example.com', ['admin']);
			$h->loginAs('root');

			$seen = '';
			foreach (self::everyAction() as $i => $action) {
				$response = $action($h);
				$this->assertInstanceOf(DataResponse::class, $response, (string)$i);
				$seen .= json_encode($response->getData(), JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE) . "\n";
			}
			$seen .= $h->logger->dump();
			foreach ([self::SECRET, $botSecret, self::BOT_PASSWORD, self::API_KEY] as $secret) {
				$this->assertStringNotContainsString($secret, $seen);
			}
			if ($situation === 'up') {
				$this->assertStringContainsString('"api_key_set":true', $seen, 'the key was stored, and only its presence came back');
			}
		} finally {
			$h->close();
		}
	}
}
