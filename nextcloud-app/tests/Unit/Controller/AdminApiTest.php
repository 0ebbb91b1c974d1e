<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;

/**
 * The admin section's OCS API against the fake sidecar. Who may call it is Nextcloud's
 * SecurityMiddleware's job (admin-only by default; RoutesTest pins the attributes).
 */
class AdminApiTest extends HarnessTestCase {
	private const API_KEY = 'sk-ant-admin-test-0123456789-very-secret';

	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('root', 'Admin', null, ['admin']);
		$this->h->loginAs('root');
	}

	/** @return array<string, array{0: ?string, 1: bool}> */
	public function versions(): array {
		return [
			'same release' => [Harness::APP_VERSION, true],
			'same release, dev build' => [Harness::APP_VERSION . '-dev', true],
			'not restarted after an update' => ['0.0.9', false],
			'unknown version' => [null, false],
		];
	}

	/** @dataProvider versions */
	public function testHealthAddsTheAppVersionAndWhetherItMatches(?string $sidecarVersion, bool $matches): void {
		if ($sidecarVersion !== null) {
			self::$sidecar->control(['version' => $sidecarVersion]);
		}
		$response = $this->h->adminController()->health();
		$this->assertSame(200, $response->getStatus());
		$data = $response->getData();
		$this->assertSame(Harness::APP_VERSION, $data['app_version']);
		$this->assertSame($matches, $data['version_matches']);
		$this->assertSame(['pending' => 2, 'running' => 1, 'failed_24h' => 0], $data['queue']);
		$this->assertSame('bwrap', $data['sandbox']['mode']);
	}

	public function testSettingsAreReadAndChanged(): void {
		$controller = $this->h->adminController();
		$data = $controller->settings()->getData();
		$this->assertSame(['workers.max'], $data['restart_required']);
		$this->assertFalse($data['settings']['brain']['api_key_set']);

		$response = $controller->updateSettings(access: ['groups' => ['staff']], workers: ['max' => 8]);
		$this->assertSame(200, $response->getStatus());
		$this->assertSame(['staff'], $response->getData()['settings']['access']['groups']);
		$this->assertSame(8, $response->getData()['settings']['workers']['max']);
		$bodies = self::$sidecar->bodies();
		$this->assertSame(['access' => ['groups' => ['staff']], 'workers' => ['max' => 8]], end($bodies)['body'], 'only the sections given are sent');

		$this->assertSame(200, $controller->updateSettings(approvals: ['external' => 'deny'])->getStatus());
		$bodies = self::$sidecar->bodies();
		$this->assertSame(['approvals' => ['external' => 'deny']], end($bodies)['body'], 'the approvals section passes through');
	}

	public function testTheApiKeyIsWriteOnly(): void {
		$response = $this->h->adminController()->updateSettings(brain: ['api_key' => self::API_KEY, 'model' => 'claude-x']);
		$this->assertSame(200, $response->getStatus());
		$this->assertTrue($response->getData()['settings']['brain']['api_key_set']);
		$this->assertStringNotContainsString(self::API_KEY, json_encode($response->getData()));
		$this->assertStringNotContainsString(self::API_KEY, json_encode($this->h->adminController()->settings()->getData()));
		$this->assertStringNotContainsString(self::API_KEY, $this->h->logger->dump());
	}

	public function testInvalidSettingsComeBackFieldByField(): void {
		$response = $this->h->adminController()->updateSettings(workers: ['max' => 0], brain: ['kind' => 'openai', 'api_key' => self::API_KEY]);
		$this->assertSame(422, $response->getStatus());
		$this->assertSame('invalid_settings', $response->getData()['code']);
		$this->assertSame(['workers.max' => 'must be at least 1', 'brain.kind' => 'only "claude" is available'], $response->getData()['fields']);
		$this->assertStringNotContainsString(self::API_KEY, json_encode($response->getData()) . $this->h->logger->dump());
		$this->assertFalse($this->h->adminController()->settings()->getData()['settings']['brain']['api_key_set'], 'nothing stored');
	}

	public function testASectionThatIsNotAnObjectIsRefusedBeforeTheSidecar(): void {
		foreach ([['a', 'b'], 'text', 5] as $bad) {
			$response = $this->h->adminController()->updateSettings(sandbox: $bad);
			$this->assertSame([400, 'invalid_request'], [$response->getStatus(), $response->getData()['code']]);
		}
		$this->assertSame([], $this->h->http->requests);
	}

	public function testAnEmptySectionTravelsAsAnObject(): void {
		$this->assertSame(200, $this->h->adminController()->updateSettings(network: [])->getStatus());
		$this->assertStringContainsString('"network":{}', (string)$this->h->http->requests[0]['options']['body']);
	}
}
