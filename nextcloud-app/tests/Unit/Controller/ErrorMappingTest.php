<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Controller\OcsBaseController;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\FakeSidecarTestCase;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\TestRequest;
use OCP\AppFramework\Http\DataResponse;

/**
 * Every way the sidecar can fail reaches the browser as an OCS answer with a stable code
 * and a message fit to show: never an exception page, never a URL, path or secret, and
 * never a 401 the browser would take for an expired login.
 */
class ErrorMappingTest extends FakeSidecarTestCase {
	private function harness(string $url, ?string $secret = self::SECRET): Harness {
		$h = new Harness($url, $secret);
		$h->directory->addUser('alice', 'Alice');
		$h->directory->addUser('root', 'Admin', null, ['admin']);
		$h->loginAs('alice');
		return $h;
	}

	/**
	 * Every action of every controller, as the browser could call it.
	 *
	 * @return array<string, \Closure(Harness): DataResponse>
	 */
	private static function actions(): array {
		return [
			'me' => static fn (Harness $h) => $h->meController()->me(),
			'status' => static fn (Harness $h) => $h->meController()->status(),
			'events' => static fn (Harness $h) => $h->meController()->events(11),
			'stop' => static fn (Harness $h) => $h->meController()->stop(),
			'user memory' => static fn (Harness $h) => $h->memoryController()->userMemory(),
			'save user memory' => static fn (Harness $h) => $h->memoryController()->saveUserMemory('x', '"e"'),
			'audit' => static fn (Harness $h) => $h->memoryController()->audit(),
			'channels' => static fn (Harness $h) => $h->memoryController()->channels(),
			'dated' => static fn (Harness $h) => $h->memoryController()->dated(),
			'facts' => static fn (Harness $h) => $h->memoryController()->facts(),
			'invalidate' => static fn (Harness $h) => $h->memoryController()->invalidateFact(1),
			'delete fact' => static fn (Harness $h) => $h->memoryController()->deleteFact(1),
			'search' => static fn (Harness $h) => $h->memoryController()->search('tea'),
			'schedule' => static fn (Harness $h) => $h->scheduleController()->schedule(),
			'job' => static fn (Harness $h) => $h->scheduleController()->jobAction('morning', 'run'),
			'settings' => static fn (Harness $h) => $h->personalSettingsController()->get(),
			'save settings' => static fn (Harness $h) => $h->personalSettingsController()->update(timezone: 'UTC'),
			'health' => static fn (Harness $h) => $h->adminController()->health(),
			'admin settings' => static fn (Harness $h) => $h->adminController()->settings(),
			'save admin settings' => static fn (Harness $h) => $h->adminController()->updateSettings(workers: ['max' => 2]),
		];
	}

	/** @return array<string, array{0: string, 1: int, 2: string, 3: string}> */
	public function failures(): array {
		return [
			'sidecar down' => ['down', 503, 'sidecar_unavailable', 'cannot be reached'],
			'not set up' => ['no secret', 503, 'sidecar_unavailable', 'occ istota:setup'],
			'other secret' => ['wrong secret', 503, 'sidecar_unavailable', 'occ istota:self-test'],
			'sidecar crashed' => ['500', 502, 'sidecar_error', 'its log'],
		];
	}

	/** @dataProvider failures */
	public function testEveryActionMapsAFailingSidecar(string $how, int $status, string $code, string $hint): void {
		$dead = FakeSidecar::deadUrl();
		$h = match ($how) {
			'down' => $this->harness($dead),
			'no secret' => $this->harness(self::$sidecar->url, null),
			'wrong secret' => $this->harness(self::$sidecar->url, 'another-secret-0123456789-0123456789-abcdefgh'),
			'500' => $this->harness(self::$sidecar->url),
		};
		if ($how === '500') {
			self::$sidecar->control(['api_status' => 500]);
		}
		try {
			foreach (self::actions() as $name => $action) {
				$response = $action($h);
				$this->assertInstanceOf(DataResponse::class, $response);
				$this->assertSame($status, $response->getStatus(), $name);
				$data = $response->getData();
				$this->assertSame(['code', 'message'], array_keys($data), $name);
				$this->assertSame($code, $data['code'], $name);
				$this->assertStringContainsString($hint, $data['message'], $name);
				$this->assertStringNotContainsString('127.0.0.1', $data['message'], $name . ': no internals');
				$this->assertStringNotContainsString('/v1/', $data['message'], $name . ': no internals');
			}
			$this->assertSame([], $h->logger->messages('error'), 'an unavailable sidecar is not an app error');
		} finally {
			$h->close();
		}
	}

	/**
	 * A sidecar URL with a path (behind a proxy): the path is signed with its prefix, so
	 * the fake accepts the signature and then knows no such endpoint.
	 */
	public function testASidecar404ReachesTheBrowserAsNotFound(): void {
		$h = $this->harness(self::$sidecar->url);
		try {
			$h->settings->setSidecarUrl(self::$sidecar->url . '/nowhere');
			$response = $h->meController()->me();
			$this->assertSame([404, 'not_found'], [$response->getStatus(), $response->getData()['code']]);
		} finally {
			$h->close();
		}
	}

	public function testAnUnexpectedFailureIsLoggedAndAnsweredWithoutDetails(): void {
		$h = $this->harness(self::$sidecar->url);
		try {
			$controller = new class(new TestRequest(), $h->session, $h->l10n, $h->logger) extends OcsBaseController {
				public function boom(): DataResponse {
					return $this->forUser(static function (string $uid): array {
						throw new \LogicException('database exploded at /srv/secret/path');
					});
				}
			};
			$response = $controller->boom();
			$this->assertSame([500, ['code' => 'internal', 'message' => 'Internal error']], [$response->getStatus(), $response->getData()]);
			$this->assertCount(1, $h->logger->messages('error'));
		} finally {
			$h->close();
		}
	}

	public function testAnUnknownSessionUserIsABadRequestNotACrash(): void {
		$h = $this->harness(self::$sidecar->url);
		try {
			$h->loginAs('alice');
			unset($h->directory->users['alice']);
			$response = $h->meController()->me();
			$this->assertSame([400, 'invalid_request'], [$response->getStatus(), $response->getData()['code']]);
		} finally {
			$h->close();
		}
	}

	public function testTheAppIdIsTheControllersAppName(): void {
		$h = $this->harness(self::$sidecar->url);
		try {
			$property = new \ReflectionProperty(\OCP\AppFramework\Controller::class, 'appName');
			$this->assertSame(Application::APP_ID, $property->getValue($h->meController()));
			$this->assertSame(AppSettings::DEFAULT_WS_PATH, $h->settings->wsPath());
		} finally {
			$h->close();
		}
	}
}
