<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\NextcloudDelegate;
use OCA\Istota\Service\RawBody;
use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Service\SidecarReady;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\BruteForceProtection;
use OCP\AppFramework\Http\Attribute\NoCSRFRequired;
use OCP\AppFramework\Http\Attribute\PublicPage;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * SidecarController holds the routes the sidecar calls, not a user: no Nextcloud login,
 * no CSRF token (it is not a browser), and instead the shared-secret signature, checked
 * by the service; wrong signatures count towards Nextcloud's brute-force protection.
 */
class SidecarController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly SidecarReady $ready,
		private readonly RawBody $body,
		private readonly NextcloudDelegate $delegate,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	/** The sidecar (re)started: hand over the Talk events waiting in the outbox. */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/ready')]
	public function ready(): DataResponse {
		return $this->respond(fn (): array => $this->ready->ready(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** Which bot messages the sidecar is unsure about were posted (see SidecarReady::posted). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/posted')]
	public function posted(): DataResponse {
		return $this->respond(fn (): array => $this->ready->posted(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** The nextcloud skill: share a file or folder of the user's (NextcloudDelegate::share). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/nextcloud/share')]
	public function share(): DataResponse {
		return $this->respond(fn (): array => $this->delegate->share(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** The nextcloud skill: the user's shares (NextcloudDelegate::listShares). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/nextcloud/shares')]
	public function shares(): DataResponse {
		return $this->respond(fn (): array => $this->delegate->listShares(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** The nextcloud skill: create a folder in the user's files (NextcloudDelegate::mkdir). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/nextcloud/mkdir')]
	public function mkdir(): DataResponse {
		return $this->respond(fn (): array => $this->delegate->mkdir(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** The nextcloud skill: the user's Talk conversations (NextcloudDelegate::conversations). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/nextcloud/conversations')]
	public function conversations(): DataResponse {
		return $this->respond(fn (): array => $this->delegate->conversations(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** The nextcloud skill: may the bot post here for the user (NextcloudDelegate::postTarget). */
	#[PublicPage]
	#[NoCSRFRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'POST', url: '/api/v1/sidecar/nextcloud/post-target')]
	public function postTarget(): DataResponse {
		return $this->respond(fn (): array => $this->delegate->postTarget(
			$this->request->getMethod(), $this->request->getRequestUri(), $this->signatureHeaders(), $this->body()));
	}

	/** @return array<string, string> */
	private function signatureHeaders(): array {
		return [
			RequestSigner::HEADER_TIMESTAMP => $this->request->getHeader(RequestSigner::HEADER_TIMESTAMP),
			RequestSigner::HEADER_NONCE => $this->request->getHeader(RequestSigner::HEADER_NONCE),
			RequestSigner::HEADER_SIGNATURE => $this->request->getHeader(RequestSigner::HEADER_SIGNATURE),
		];
	}

	private function body(): string {
		return $this->body->read();
	}
}
