<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\BadSignatureException;
use OCP\AppFramework\Utility\ITimeFactory;

/**
 * SidecarReady is the sidecar telling the app it has (re)started: Talk events that
 * waited in the outbox while it was down are handed over at once, instead of when the
 * next message arrives or Nextcloud's cron next runs (five minutes on a usual system
 * cron). The call must carry the shared-secret signature; it only ever triggers a
 * delivery the background job would make anyway, so a replay is harmless.
 */
class SidecarReady {
	/** Time for one hand-over; the rest is left to the next message or the job. */
	private const BUDGET_SECONDS = 20.0;

	public function __construct(
		private readonly AppSettings $settings,
		private readonly RequestSigner $signer,
		private readonly OutboxFlusher $flusher,
		private readonly ITimeFactory $time,
	) {
	}

	/**
	 * @param array<string, string> $headers the X-Istota-* signature headers
	 * @return array{delivered: int, complete: bool}
	 * @throws BadSignatureException when the signature is missing or wrong
	 */
	public function ready(string $method, string $pathAndQuery, array $headers, string $body): array {
		$ok = $this->signer->verify(
			$this->settings->sharedSecret(),
			$method,
			$pathAndQuery,
			$headers[RequestSigner::HEADER_TIMESTAMP] ?? '',
			$headers[RequestSigner::HEADER_NONCE] ?? '',
			$headers[RequestSigner::HEADER_SIGNATURE] ?? '',
			$body,
			$this->time->getTime(),
		);
		if (!$ok) {
			throw new BadSignatureException();
		}
		$result = $this->flusher->flush(self::BUDGET_SECONDS, SidecarClient::DEFAULT_TIMEOUT, SidecarClient::DEFAULT_CONNECT_TIMEOUT, respectBackoff: false);
		return ['delivered' => $result->delivered(), 'complete' => $result->drained];
	}
}
