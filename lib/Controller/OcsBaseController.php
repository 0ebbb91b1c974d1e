<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Exception\BadSignatureException;
use OCA\Istota\Exception\DelegateRefusedException;
use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Istota\Exception\SidecarUnavailableException;
use OCP\AppFramework\Http;
use OCP\AppFramework\Http\DataResponse;
use OCP\AppFramework\OCSController;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUser;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * OcsBaseController is the one place where the OCS API turns outcomes into responses
 * (docs/user-api.md): every action is one service call inside respond() or forUser().
 *
 * - A sidecar that is down, not set up, or refusing our signature: 503
 *   {code: "sidecar_unavailable", message} — the browser cannot fix a signature, and a
 *   401 would look like an expired Nextcloud login.
 * - A sidecar 4xx: the same status with {code, message, fields?, current_etag?}.
 * - A sidecar 503 with a code (e.g. "unavailable": Nextcloud's WebDAV is down): 503 with
 *   that code; any other sidecar 5xx: 502 "sidecar_error".
 * - A bad request the app refuses itself: 400 "invalid_request".
 * - An action the sidecar asked for on a user's behalf that the user may not do: 403 with
 *   the refusal's code (e.g. "not_owner", "not_participant").
 * - A request claiming to come from the sidecar without its signature: 401
 *   "bad_signature", counted by Nextcloud's brute-force protection.
 * - Anything else: 500 "internal", logged here, never shown.
 *
 * Messages never hold internals (URLs, paths, secrets): those go to the log only.
 *
 * CSRF: these are OCS routes; Nextcloud's SecurityMiddleware lets an OCSController request
 * without a CSRF token through only with the OCS-APIRequest: true header (which a
 * cross-site form cannot send), so no action carries #[NoCSRFRequired].
 */
abstract class OcsBaseController extends OCSController {
	/** Brute-force protection bucket of requests that claim to come from the sidecar. */
	public const THROTTLE_ACTION = 'istota_sidecar';

	public function __construct(
		IRequest $request,
		private readonly IUserSession $userSession,
		private readonly IL10N $l10n,
		private readonly LoggerInterface $logger,
	) {
		parent::__construct(Application::APP_ID, $request);
	}

	/**
	 * Runs $action with the id of the logged-in user, the only user id a personal route
	 * ever uses.
	 *
	 * @param \Closure(string): mixed $action
	 */
	protected function forUser(\Closure $action): DataResponse {
		$user = $this->userSession->getUser();
		if (!$user instanceof IUser || (string)$user->getUID() === '') {
			return self::error(Http::STATUS_UNAUTHORIZED, 'not_logged_in', $this->l10n->t('You are not logged in.'));
		}
		$uid = (string)$user->getUID();
		return $this->respond(static fn (): mixed => $action($uid));
	}

	/** @param \Closure(): mixed $action */
	protected function respond(\Closure $action): DataResponse {
		try {
			return new DataResponse($action());
		} catch (BadSignatureException) {
			$response = self::error(Http::STATUS_UNAUTHORIZED, 'bad_signature', $this->l10n->t('The request is not signed by the Istota service.'));
			$response->throttle(['action' => self::THROTTLE_ACTION]);
			return $response;
		} catch (InvalidInputException $e) {
			return self::error(Http::STATUS_BAD_REQUEST, 'invalid_request', $e->getMessage());
		} catch (DelegateRefusedException $e) {
			return self::error(Http::STATUS_FORBIDDEN, $e->getErrorCode(), $e->getMessage());
		} catch (SidecarNotConfiguredException $e) {
			$this->logger->info('Istota sidecar is not configured: ' . $e->getMessage());
			return self::error(Http::STATUS_SERVICE_UNAVAILABLE, 'sidecar_unavailable',
				$this->l10n->t('Istota is not set up yet. An administrator needs to run occ istota:setup.'));
		} catch (SidecarUnavailableException $e) {
			return $this->unavailable($e);
		} catch (SidecarRejectedException $e) {
			return $this->rejected($e);
		} catch (\Throwable $e) {
			$this->logger->error('Istota settings API failed', ['exception' => $e]);
			return self::error(Http::STATUS_INTERNAL_SERVER_ERROR, 'internal', $this->l10n->t('Internal error'));
		}
	}

	private function unavailable(SidecarUnavailableException $e): DataResponse {
		$status = $e->getHttpStatus();
		if ($status === null) {
			$this->logger->info('Istota sidecar cannot be reached: ' . $e->getMessage());
			return self::error(Http::STATUS_SERVICE_UNAVAILABLE, 'sidecar_unavailable',
				$this->l10n->t('The Istota service cannot be reached right now. Nothing is lost; try again in a moment.'));
		}
		$this->logger->warning('Istota sidecar failed: ' . $e->getMessage());
		if ($status === Http::STATUS_SERVICE_UNAVAILABLE && $e->getErrorCode() !== '') {
			$message = $e->getSidecarMessage() !== '' ? $e->getSidecarMessage() : $this->l10n->t('Try again in a moment.');
			return self::error(Http::STATUS_SERVICE_UNAVAILABLE, $e->getErrorCode(), $message);
		}
		return self::error(Http::STATUS_BAD_GATEWAY, 'sidecar_error',
			$this->l10n->t('The Istota service failed to answer. An administrator finds the reason in its log.'));
	}

	private function rejected(SidecarRejectedException $e): DataResponse {
		$status = $e->getHttpStatus();
		if ($status === Http::STATUS_UNAUTHORIZED) {
			$this->logger->warning('Istota sidecar refused the app\'s signature: ' . $e->getMessage());
			return self::error(Http::STATUS_SERVICE_UNAVAILABLE, 'sidecar_unavailable',
				$this->l10n->t('Nextcloud and the Istota service do not trust each other (shared secret or clock). An administrator should run occ istota:self-test.'));
		}
		$code = $e->getErrorCode() !== '' ? $e->getErrorCode() : 'invalid_request';
		$message = $e->getSidecarMessage() !== '' ? $e->getSidecarMessage() : $this->l10n->t('The request was refused.');
		$data = ['code' => $code, 'message' => $message];
		if ($e->getFields() !== []) {
			$data['fields'] = $e->getFields();
		}
		if ($e->getCurrentEtag() !== '') {
			$data['current_etag'] = $e->getCurrentEtag();
		}
		return new DataResponse($data, $status);
	}

	private static function error(int $status, string $code, string $message): DataResponse {
		return new DataResponse(['code' => $code, 'message' => $message], $status);
	}
}
