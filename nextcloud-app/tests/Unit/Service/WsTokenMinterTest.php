<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Service\WsTokenMinter;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;

/**
 * The WebSocket token must agree byte for byte with the sidecar's verifier: both check
 * sidecar/internal/signing/testdata/ws_vectors.json.
 */
class WsTokenMinterTest extends TestCase {
	private const VECTORS = ISTOTA_REPO_ROOT . '/sidecar/internal/signing/testdata/ws_vectors.json';
	private const SECRET = 'ws-token-test-shared-secret-0123456789-abcdefghij';

	private Harness $h;

	protected function setUp(): void {
		$this->h = new Harness(FakeSidecar::deadUrl(), self::SECRET);
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	/** @return array<string, array{0: string, 1: array<string, mixed>}> */
	public function vectors(): array {
		$file = json_decode((string)file_get_contents(self::VECTORS), true, 512, JSON_THROW_ON_ERROR);
		$cases = [];
		foreach ($file['cases'] as $case) {
			$cases[$case['name']] = [$file['secret'], $case];
		}
		return $cases;
	}

	public function testTheVectorFileUsesOurLabel(): void {
		$file = json_decode((string)file_get_contents(self::VECTORS), true, 512, JSON_THROW_ON_ERROR);
		$this->assertSame(WsTokenMinter::LABEL, $file['label']);
		$this->assertGreaterThanOrEqual(3, count(array_filter($file['cases'], static fn (array $c): bool => $c['valid'])));
	}

	/**
	 * Minting the vector's claims gives exactly the vector's token when the vector is a
	 * well-made token (valid, or refused only for its time), and never a forged one.
	 *
	 * @dataProvider vectors
	 * @param array<string, mixed> $case
	 */
	public function testMintingAgreesWithTheSidecarsVectors(string $secret, array $case): void {
		$claims = json_decode($case['payload_json'], true, 512, JSON_THROW_ON_ERROR);
		$this->assertSame($case['payload_json'], WsTokenMinter::payloadJson($claims['uid'], $claims['exp'], $claims['nonce']));
		$minted = WsTokenMinter::token($secret, $claims['uid'], $claims['exp'], $claims['nonce']);
		$refusedForTimeOnly = !$case['valid'] && ($claims['exp'] <= $case['now'] || $claims['exp'] - $case['now'] > 300);
		if ($case['valid'] || $refusedForTimeOnly) {
			$this->assertSame($case['token'], $minted);
		} else {
			$this->assertNotSame($case['token'], $minted);
		}
		if ($case['valid']) {
			$this->assertSame($case['uid'], $claims['uid']);
		}
	}

	public function testMintedTokenNamesTheUserAndExpiresSoon(): void {
		$this->h->clock->now = 1800000000;
		$minted = $this->h->wsTokens()->mint('alice');
		$this->assertSame(WsTokenMinter::TTL, $minted['expires_in']);
		$this->assertLessThanOrEqual(120, $minted['expires_in']);

		[$version, $payload, $mac] = explode('.', $minted['token']);
		$this->assertSame('v1', $version);
		$claims = json_decode(base64_decode(strtr($payload, '-_', '+/')), true);
		$this->assertSame('alice', $claims['uid']);
		$this->assertSame(1800000000 + WsTokenMinter::TTL, $claims['exp']);
		$this->assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $claims['nonce']);
		$this->assertSame(WsTokenMinter::token(self::SECRET, 'alice', $claims['exp'], $claims['nonce']), $minted['token']);
		$this->assertDoesNotMatchRegularExpression('/[=+\/]/', $payload . $mac, 'base64url without padding');
		$this->assertNotSame($minted['token'], $this->h->wsTokens()->mint('alice')['token'], 'a fresh nonce each time');
	}

	/** @return array<string, array{0: string, 1: string, 2: string}> */
	public function urls(): array {
		return [
			'https instance' => ['https://cloud.example.com', '', 'wss://cloud.example.com/istota-ws/'],
			'instance in a subfolder' => ['https://example.com/nextcloud', '', 'wss://example.com/istota-ws/'],
			'plain http with a port' => ['http://192.168.1.5:8080', '', 'ws://192.168.1.5:8080/istota-ws/'],
			'another proxy path' => ['https://cloud.example.com', '/live/', 'wss://cloud.example.com/live/'],
			'a separate host' => ['https://cloud.example.com', 'wss://live.example.com/ws/', 'wss://live.example.com/ws/'],
			'nonsense falls back' => ['https://cloud.example.com', 'javascript:alert(1)', 'wss://cloud.example.com/istota-ws/'],
		];
	}

	/** @dataProvider urls */
	public function testTheUrlIsTheProxiedSocketWithTheTokenIncluded(string $base, string $wsPath, string $want): void {
		$this->h->urls->base = $base;
		if ($wsPath !== '') {
			$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_WS_PATH, $wsPath);
		}
		$minted = $this->h->wsTokens()->mint('alice');
		$this->assertSame($want . '?token=' . $minted['token'], $minted['url']);
	}

	public function testTheControllerMintsForTheLoggedInUserOnly(): void {
		$this->h->directory->addUser('alice', 'Alice');
		$this->h->loginAs('alice');
		$response = $this->h->meController()->wsToken();
		$this->assertSame(200, $response->getStatus());
		[, $payload] = explode('.', $response->getData()['token']);
		$this->assertSame('alice', json_decode(base64_decode(strtr($payload, '-_', '+/')), true)['uid']);
		$this->assertStringNotContainsString(self::SECRET, json_encode($response->getData()));
		$this->assertSame([], $this->h->http->requests, 'minted in PHP, no sidecar call');
	}

	public function testWithoutASharedSecretThereIsNoToken(): void {
		$h = new Harness(FakeSidecar::deadUrl(), null);
		try {
			$h->directory->addUser('alice', 'Alice');
			$h->loginAs('alice');
			$response = $h->meController()->wsToken();
			$this->assertSame([503, 'sidecar_unavailable'], [$response->getStatus(), $response->getData()['code']]);
		} finally {
			$h->close();
		}
	}
}
